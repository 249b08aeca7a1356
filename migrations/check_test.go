package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/migrations"
)

func TestCheck(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t, pgtest.Options{NoMigrate: true})
	err := migrations.Check(ctx, db.Pool)
	var nm *migrations.NotMigratedError
	if !errors.As(err, &nm) || !errors.Is(err, migrations.ErrNotMigrated) {
		t.Fatalf("Check on an empty schema = %v, want a *NotMigratedError", err)
	}
	if nm.Schema != db.Schema || len(nm.Missing) != 21 {
		t.Fatalf("Check = %+v, want schema %q and 21 missing relations", nm, db.Schema)
	}
	want := `jobfence's tables are missing in schema "` + db.Schema + `" (jobfence_jobs, jobfence_fence_seq, jobfence_schedules, jobfence_idempotency_keys, jobfence_results, jobfence_queues, jobfence_workers, jobfence_claim_hints, jobfence_workflows, jobfence_jobs_finished, jobfence_finished_bounds, jobfence_releases, jobfence_workflow_tasks, jobfence_task_edges, jobfence_cascades, jobfence_steps, jobfence_signals, jobfence_stats_minute, jobfence_depth_minute, jobfence_attempt_logs, jobfence_limit_fair): run ` + "`jobfence migrate up`"
	if !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("message:\n%s\nwant prefix:\n%s", err, want)
	}
	if err := migrations.Up(ctx, db.URL); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Check(ctx, db.Pool); err != nil {
		t.Fatalf("Check after Up = %v", err)
	}
}

// TestDownNothingToRollBack: Down on a schema with no migration applied
// says there is nothing to roll back, not goose's "no next version found".
func TestDownNothingToRollBack(t *testing.T) {
	db := pgtest.New(t, pgtest.Options{NoMigrate: true})
	err := migrations.Down(context.Background(), db.URL)
	if want := "migrations: down: nothing to roll back: no jobfence migration is applied"; !errors.Is(err, migrations.ErrNothingToRollBack) || err.Error() != want {
		t.Fatalf("Down on a fresh schema = %v, want %q", err, want)
	}
}

// TestCheckBeforeUpgrade: a database migrated before the queue pause and
// worker registry tables (version 4) is told to run `jobfence migrate up`,
// naming just the tables and the column it lacks; Down of version 5 removes them again.
func TestCheckBeforeUpgrade(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t, pgtest.Options{NoMigrate: true})
	p := providerAt(t, db.URL, 4)
	want := `jobfence's tables are missing in schema "` + db.Schema + `" (jobfence_queues, jobfence_workers, jobfence_claim_hints, jobfence_jobs.trace_context, jobfence_jobs.idempotency_key, jobfence_jobs.deadline, jobfence_jobs.timeout_us, jobfence_schedules.version, jobfence_jobs.unique_hash, jobfence_jobs.output, jobfence_jobs.workflow_id, jobfence_jobs.run_anyway, jobfence_workflows, jobfence_jobs.run_trace, jobfence_jobs.delete_on_complete, jobfence_jobs_finished, jobfence_finished_bounds, jobfence_releases, jobfence_workflow_tasks, jobfence_task_edges, jobfence_jobs.dependents_released, jobfence_cascades, jobfence_jobs.run_on_failure, jobfence_jobs.dep_failed, jobfence_steps, jobfence_signals, jobfence_jobs.awaiting, jobfence_jobs.awaited, jobfence_jobs.progress, jobfence_jobs.tags, jobfence_stats_minute, jobfence_depth_minute, jobfence_attempt_logs, jobfence_jobs.limit_fair, jobfence_limit_fair): run ` + "`jobfence migrate up`"
	if err := migrations.Check(ctx, db.Pool); !errors.Is(err, migrations.ErrNotMigrated) || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("Check at version 4 = %v, want prefix %q", err, want)
	}
	if err := migrations.Up(ctx, db.URL); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Check(ctx, db.Pool); err != nil {
		t.Fatalf("Check after Up = %v", err)
	}
	// Back to version 4, past any later migration.
	if _, err := p.DownTo(ctx, 4); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Check(ctx, db.Pool); !strings.HasPrefix(fmt.Sprint(err), want) {
		t.Fatalf("Check after going down to version 4 = %v, want prefix %q", err, want)
	}
}

// TestCheckBeforeTraceContext: a database migrated up to version 8 has
// every table but lacks the jobs' trace_context column (version 9), and
// is told so, naming the column.
func TestCheckBeforeTraceContext(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t, pgtest.Options{NoMigrate: true})
	providerAt(t, db.URL, 8)
	want := `jobfence's tables are missing in schema "` + db.Schema + `" (jobfence_jobs.trace_context, jobfence_jobs.idempotency_key, jobfence_jobs.deadline, jobfence_jobs.timeout_us, jobfence_schedules.version, jobfence_jobs.unique_hash, jobfence_jobs.output, jobfence_jobs.workflow_id, jobfence_jobs.run_anyway, jobfence_workflows, jobfence_jobs.run_trace, jobfence_jobs.delete_on_complete, jobfence_jobs_finished, jobfence_finished_bounds, jobfence_releases, jobfence_workflow_tasks, jobfence_task_edges, jobfence_jobs.dependents_released, jobfence_cascades, jobfence_jobs.run_on_failure, jobfence_jobs.dep_failed, jobfence_steps, jobfence_signals, jobfence_jobs.awaiting, jobfence_jobs.awaited, jobfence_jobs.progress, jobfence_jobs.tags, jobfence_queues.concurrency, jobfence_queues.run_state, jobfence_stats_minute, jobfence_depth_minute, jobfence_attempt_logs, jobfence_jobs.limit_fair, jobfence_limit_fair): run ` + "`jobfence migrate up`"
	if err := migrations.Check(ctx, db.Pool); !errors.Is(err, migrations.ErrNotMigrated) || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("Check at version 8 = %v, want prefix %q", err, want)
	}
}

// TestCheckBeforeJobKeys: a database migrated up to version 9 lacks the
// jobs' idempotency key, deadline and timeout columns (version 10), and
// is told so, naming them.
func TestCheckBeforeJobKeys(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t, pgtest.Options{NoMigrate: true})
	providerAt(t, db.URL, 9)
	want := `jobfence's tables are missing in schema "` + db.Schema + `" (jobfence_jobs.idempotency_key, jobfence_jobs.deadline, jobfence_jobs.timeout_us, jobfence_schedules.version, jobfence_jobs.unique_hash, jobfence_jobs.output, jobfence_jobs.workflow_id, jobfence_jobs.run_anyway, jobfence_workflows, jobfence_jobs.run_trace, jobfence_jobs.delete_on_complete, jobfence_jobs_finished, jobfence_finished_bounds, jobfence_releases, jobfence_workflow_tasks, jobfence_task_edges, jobfence_jobs.dependents_released, jobfence_cascades, jobfence_jobs.run_on_failure, jobfence_jobs.dep_failed, jobfence_steps, jobfence_signals, jobfence_jobs.awaiting, jobfence_jobs.awaited, jobfence_jobs.progress, jobfence_jobs.tags, jobfence_queues.concurrency, jobfence_queues.run_state, jobfence_stats_minute, jobfence_depth_minute, jobfence_attempt_logs, jobfence_jobs.limit_fair, jobfence_limit_fair): run ` + "`jobfence migrate up`"
	if err := migrations.Check(ctx, db.Pool); !errors.Is(err, migrations.ErrNotMigrated) || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("Check at version 9 = %v, want prefix %q", err, want)
	}
}

// TestCheckBeforeRuntimeSchedules: a database migrated up to version 10
// lacks the schedules' columns of schedules changed at run time (version
// 11), and is told so.
func TestCheckBeforeRuntimeSchedules(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t, pgtest.Options{NoMigrate: true})
	providerAt(t, db.URL, 10)
	want := `jobfence's tables are missing in schema "` + db.Schema + `" (jobfence_schedules.version, jobfence_jobs.unique_hash, jobfence_jobs.output, jobfence_jobs.workflow_id, jobfence_jobs.run_anyway, jobfence_workflows, jobfence_jobs.run_trace, jobfence_jobs.delete_on_complete, jobfence_jobs_finished, jobfence_finished_bounds, jobfence_releases, jobfence_workflow_tasks, jobfence_task_edges, jobfence_jobs.dependents_released, jobfence_cascades, jobfence_jobs.run_on_failure, jobfence_jobs.dep_failed, jobfence_steps, jobfence_signals, jobfence_jobs.awaiting, jobfence_jobs.awaited, jobfence_jobs.progress, jobfence_jobs.tags, jobfence_queues.concurrency, jobfence_queues.run_state, jobfence_stats_minute, jobfence_depth_minute, jobfence_attempt_logs, jobfence_jobs.limit_fair, jobfence_limit_fair): run ` + "`jobfence migrate up`"
	if err := migrations.Check(ctx, db.Pool); !errors.Is(err, migrations.ErrNotMigrated) || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("Check at version 10 = %v, want prefix %q", err, want)
	}
}

// TestCheckBeforeComputedUniqueness: a database migrated up to version 11
// lacks the columns of uniqueness computed by jobfence (version 12), and
// is told so.
func TestCheckBeforeComputedUniqueness(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t, pgtest.Options{NoMigrate: true})
	providerAt(t, db.URL, 11)
	want := `jobfence's tables are missing in schema "` + db.Schema + `" (jobfence_jobs.unique_hash, jobfence_jobs.output, jobfence_jobs.workflow_id, jobfence_jobs.run_anyway, jobfence_workflows, jobfence_jobs.run_trace, jobfence_jobs.delete_on_complete, jobfence_jobs_finished, jobfence_finished_bounds, jobfence_releases, jobfence_workflow_tasks, jobfence_task_edges, jobfence_jobs.dependents_released, jobfence_cascades, jobfence_jobs.run_on_failure, jobfence_jobs.dep_failed, jobfence_steps, jobfence_signals, jobfence_jobs.awaiting, jobfence_jobs.awaited, jobfence_jobs.progress, jobfence_jobs.tags, jobfence_queues.concurrency, jobfence_queues.run_state, jobfence_stats_minute, jobfence_depth_minute, jobfence_attempt_logs, jobfence_jobs.limit_fair, jobfence_limit_fair): run ` + "`jobfence migrate up`"
	if err := migrations.Check(ctx, db.Pool); !errors.Is(err, migrations.ErrNotMigrated) || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("Check at version 11 = %v, want prefix %q", err, want)
	}
}

// TestCheckBeforeFinishedJobs: a database migrated up to version 16 lacks
// delete on completion (17), the finished-jobs table (18) and the
// completing attempt's trace (20), the ranges of dependents to release
// (21) and the table of task names (22), and is told so.
func TestCheckBeforeFinishedJobs(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t, pgtest.Options{NoMigrate: true})
	providerAt(t, db.URL, 16)
	want := `jobfence's tables are missing in schema "` + db.Schema + `" (jobfence_jobs.run_trace, jobfence_jobs.delete_on_complete, jobfence_jobs_finished, jobfence_finished_bounds, jobfence_releases, jobfence_workflow_tasks, jobfence_task_edges, jobfence_jobs.dependents_released, jobfence_limit_slots.backoff_until, jobfence_cascades, jobfence_jobs.run_on_failure, jobfence_jobs.dep_failed, jobfence_steps, jobfence_signals, jobfence_jobs.awaiting, jobfence_jobs.awaited, jobfence_jobs.progress, jobfence_jobs.tags, jobfence_workflows.parent_job_id, jobfence_workflows.parent_signalled_at, jobfence_queues.concurrency, jobfence_queues.run_state, jobfence_stats_minute, jobfence_depth_minute, jobfence_attempt_logs, jobfence_limits.fair_by, jobfence_jobs.limit_fair, jobfence_limit_fair): run ` + "`jobfence migrate up`"
	if err := migrations.Check(ctx, db.Pool); !errors.Is(err, migrations.ErrNotMigrated) || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("Check at version 16 = %v, want prefix %q", err, want)
	}
}
