package migrations

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ErrNotMigrated is wrapped by the error Check returns when jobfence's
// tables are missing: the database was never migrated, or the connection's
// search_path names another schema.
var ErrNotMigrated = errors.New("jobfence's tables are missing")

// NotMigratedError names the schema that lacks jobfence's tables and the
// tables it lacks. errors.Is(err, ErrNotMigrated) reports true for it.
type NotMigratedError struct {
	// Schema is the schema the connection looked in: the first schema of
	// its search_path.
	Schema string
	// Missing are the relations that are not there.
	Missing []string
}

func (e *NotMigratedError) Error() string {
	return fmt.Sprintf("jobfence's tables are missing in schema %q (%s): run `jobfence migrate up` (or migrations.Up) against this database and search_path",
		e.Schema, strings.Join(e.Missing, ", "))
}

// Is reports whether target is ErrNotMigrated.
func (e *NotMigratedError) Is(target error) bool { return target == ErrNotMigrated }

// relations are the tables and sequences the migrations create, all of
// which a worker, a scheduler and the idempotency store need, and, as
// table.column, the columns later migrations added to tables that were
// already there: a database migrated before them has every table and
// still cannot take a job.
var relations = []string{
	"jobfence_jobs", "jobfence_fence_seq", "jobfence_schedules",
	"jobfence_idempotency_keys", "jobfence_results", "jobfence_queues", "jobfence_workers", "jobfence_claim_hints",
	"jobfence_jobs.trace_context", "jobfence_jobs.idempotency_key", "jobfence_jobs.deadline", "jobfence_jobs.timeout_us",
	"jobfence_schedules.version", "jobfence_jobs.unique_hash",
	"jobfence_jobs.output", "jobfence_jobs.workflow_id", "jobfence_jobs.run_anyway", "jobfence_workflows",
	"jobfence_jobs.run_trace",
	"jobfence_jobs.delete_on_complete", "jobfence_jobs_finished", "jobfence_finished_bounds",
	"jobfence_releases", "jobfence_workflow_tasks",
	"jobfence_task_edges", "jobfence_jobs.dependents_released",
	"jobfence_limit_slots.backoff_until",
	"jobfence_cascades", "jobfence_jobs.run_on_failure", "jobfence_jobs.dep_failed",
	"jobfence_steps", "jobfence_signals", "jobfence_jobs.awaiting", "jobfence_jobs.awaited", "jobfence_jobs.progress", "jobfence_jobs.tags", "jobfence_jobs_finished.tags",
	"jobfence_workflows.parent_job_id", "jobfence_workflows.parent_signalled_at",
	"jobfence_queues.concurrency", "jobfence_queues.run_state",
	"jobfence_stats_minute", "jobfence_depth_minute",
	"jobfence_attempt_logs",
	"jobfence_limits.fair_by", "jobfence_jobs.limit_fair", "jobfence_jobs_finished.limit_fair", "jobfence_limit_fair",
}

// Querier is what Check needs of a connection: a *pgxpool.Pool, a *pgx.Conn
// and a pgx.Tx all have it.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// checkSQL looks each relation up the way an unqualified query would (the
// search_path), and names the schema such a query would create it in. A
// column counts as missing only when its table is there: a table that is
// missing is named once.
const checkSQL = `
SELECT coalesce(current_schema(), current_setting('search_path')),
       array(SELECT r FROM unnest($1::text[]) AS r
             WHERE CASE WHEN strpos(r, '.') = 0 THEN to_regclass(quote_ident(r)) IS NULL
                        ELSE to_regclass(quote_ident(split_part(r, '.', 1))) IS NOT NULL AND NOT EXISTS (
                            SELECT FROM pg_attribute
                            WHERE attrelid = to_regclass(quote_ident(split_part(r, '.', 1)))
                              AND attname = split_part(r, '.', 2) AND NOT attisdropped)
                   END)`

// Check reports whether jobfence's tables are reachable through db's
// search_path. It returns a *NotMigratedError when any is missing, and a
// wrapped connection error when db cannot be asked.
func Check(ctx context.Context, db Querier) error {
	var schema string
	var missing []string
	if err := db.QueryRow(ctx, checkSQL, relations).Scan(&schema, &missing); err != nil {
		return fmt.Errorf("migrations: check: %w", err)
	}
	if len(missing) > 0 {
		return &NotMigratedError{Schema: schema, Missing: missing}
	}
	return nil
}
