package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// cli runs jobfence with args and returns its stdout, stderr and exit status.
func cli(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), code
}

// TestHelpExitsZero: -h and --help print a usage and exit 0 for every
// command, and run nothing (setup would install packages).
func TestHelpExitsZero(t *testing.T) {
	for name := range commands() {
		for _, h := range []string{"-h", "--help"} {
			out, errs, code := cli(t, name, h)
			if code != 0 || !strings.Contains(strings.ToLower(out+errs), "usage") {
				t.Errorf("jobfence %s %s: exit %d, stdout %q, stderr %q; want 0 and a usage", name, h, code, out, errs)
			}
		}
	}
}

// TestUnmigratedDatabase: every command that reads jobfence's tables says
// they are missing, in which schema, and what to run.
func TestUnmigratedDatabase(t *testing.T) {
	db := pgtest.New(t, pgtest.Options{NoMigrate: true})
	want := fmt.Sprintf("jobfence's tables are missing in schema %q (jobfence_jobs, jobfence_fence_seq, jobfence_schedules, "+
		"jobfence_idempotency_keys, jobfence_results, jobfence_queues, jobfence_workers, jobfence_claim_hints, jobfence_workflows, jobfence_jobs_finished, jobfence_finished_bounds, jobfence_releases, jobfence_workflow_tasks, jobfence_task_edges, jobfence_cascades, jobfence_steps, jobfence_signals, jobfence_stats_minute, jobfence_depth_minute, jobfence_attempt_logs, jobfence_limit_fair): run `jobfence migrate up`", db.Schema)
	for _, args := range [][]string{
		{"jobs", "list"}, {"jobs", "show", "1"}, {"jobs", "retry", "1"}, {"jobs", "cancel", "1"},
		{"schedules", "list"}, {"schedules", "delete", "nightly"}, {"ui", "--listen", "127.0.0.1:0"},
		{"queues", "list"}, {"queues", "pause", "mail"}, {"queues", "resume", "mail"}, {"workers", "list"},
	} {
		_, errs, code := cli(t, append(args, "--database-url", db.URL)...)
		if prefix := "jobfence " + args[0] + ": " + want; code != 1 || !strings.HasPrefix(errs, prefix) {
			t.Errorf("jobfence %q: exit %d, stderr:\n%s\nwant 1 and:\n%s", args, code, errs, prefix)
		}
	}
	_, errs, code := cli(t, "migrate", "down", "--database-url", db.URL)
	if want := "jobfence migrate: migrations: down: nothing to roll back: no jobfence migration is applied\n"; code != 1 || errs != want {
		t.Errorf("migrate down on a fresh schema: exit %d, stderr %q; want 1 and %q", code, errs, want)
	}
}

// TestConnectErrors: the first line of a failed connection says what went
// wrong, not pgx's first attempt (a TLS one with sslmode=prefer).
func TestConnectErrors(t *testing.T) {
	cfg, err := pgconn.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		t.Fatal(err)
	}
	base := address(cfg)
	noDB := fmt.Sprintf("postgres://postgres@%s/no_such_db", base)
	tests := []struct{ url, want string }{
		{noDB, `jobfence jobs: cannot connect to PostgreSQL at ` + base + `: database "no_such_db" does not exist` + "\n"},
		{"postgres://postgres@127.0.0.1:1/x", "jobfence jobs: cannot connect to PostgreSQL at 127.0.0.1:1: connection refused\n"},
		{"host=127.0.0.1 port=1 user=postgres", "jobfence jobs: cannot connect to PostgreSQL at 127.0.0.1:1: connection refused\n"},
	}
	for _, tt := range tests {
		if _, errs, code := cli(t, "jobs", "list", "--database-url", tt.url); code != 1 || errs != tt.want {
			t.Errorf("jobs list --database-url %s: exit %d, stderr:\n%s\nwant 1 and:\n%s", tt.url, code, errs, tt.want)
		}
	}
}

// TestJobsBadState: an unknown --state is refused, naming the states,
// before any connection is made.
func TestJobsBadState(t *testing.T) {
	_, errs, code := cli(t, "jobs", "list", "--state", "bogus", "--database-url", "postgres://127.0.0.1:1/x")
	want := `jobfence jobs: --state: jobfence: unknown job state "bogus": want one of available, scheduled, running, retryable, completed, discarded, cancelled, limited, pending` + "\n"
	if code != 1 || errs != want {
		t.Fatalf("exit %d, stderr %q; want 1 and %q", code, errs, want)
	}
}

// claimAndFinish enqueues a job, claims it and reports outcome for it.
func claimAndFinish(t *testing.T, c *pgqueue.Client, f queue.Finish) int64 {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "charge", Args: []byte(`{"cents":4200}`)}); err != nil {
		t.Fatal(err)
	}
	jobs, err := c.Claim(ctx, queue.ClaimParams{Queue: "default", Limit: 1, Lease: time.Minute, WorkerID: "test"})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %v, %d jobs", err, len(jobs))
	}
	f.Lease = jobs[0].Lease()
	if stale, err := c.Finish(ctx, []queue.Finish{f}); err != nil || len(stale) != 0 {
		t.Fatalf("finish: %v, stale %v", err, stale)
	}
	return jobs[0].ID
}

// TestJobsShowTrace: the stack of a recovered panic, stored with the
// attempt's error, is printed under it.
func TestJobsShowTrace(t *testing.T) {
	db := pgtest.New(t)
	c := pgqueue.New(db.Pool, pgqueue.Config{})
	trace := "goroutine 7 [running]:\nmain.charge(...)\n\t/src/charge.go:12 +0x1d"
	id := claimAndFinish(t, c, queue.Finish{Outcome: queue.OutcomeRetry, Delay: time.Hour,
		Error: &queue.AttemptError{Attempt: 1, At: time.Now(), Error: "panic: card declined", Trace: trace}})
	out, errs, code := cli(t, "jobs", "show", fmt.Sprint(id), "--database-url", db.URL)
	want := ": panic: card declined\n    panic stack:\n      goroutine 7 [running]:\n      main.charge(...)\n      \t/src/charge.go:12 +0x1d\n"
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("jobs show: exit %d, stderr %q, stdout:\n%s\nwant it to contain:\n%s", code, errs, out, want)
	}
}

// TestJobsRetryCompleted: a completed job is not run again by a mistaken
// retry; --force runs it again and says so.
func TestJobsRetryCompleted(t *testing.T) {
	db := pgtest.New(t)
	c := pgqueue.New(db.Pool, pgqueue.Config{})
	id := claimAndFinish(t, c, queue.Finish{Outcome: queue.OutcomeComplete})
	state := func() queue.State {
		j, err := c.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return j.State
	}
	out, errs, code := cli(t, "jobs", "retry", fmt.Sprint(id), "--database-url", db.URL)
	want := fmt.Sprintf("jobfence jobs: job %d completed already: it ran successfully, and retrying would run it again, "+
		"repeating its effects; pass --force to run it again anyway\n", id)
	if code != 1 || errs != want || out != "" {
		t.Fatalf("retry of a completed job: exit %d, stdout %q, stderr %q; want 1 and %q", code, out, errs, want)
	}
	if s := state(); s != queue.StateCompleted {
		t.Fatalf("after a refused retry the job is %s, want completed", s)
	}
	out, errs, code = cli(t, "jobs", "retry", "--force", fmt.Sprint(id), "--database-url", db.URL)
	want = fmt.Sprintf("job %d had completed; running it again now, as --force asks: its effects will happen again\n", id)
	if code != 0 || out != want {
		t.Fatalf("retry --force: exit %d, stdout %q, stderr %q; want 0 and %q", code, out, errs, want)
	}
	if s := state(); s != queue.StateAvailable {
		t.Fatalf("after retry --force the job is %s, want available", s)
	}
	// --force on a job that did not complete is a plain retry.
	out, _, code = cli(t, "jobs", "retry", "--force", fmt.Sprint(id), "--database-url", db.URL)
	if want := fmt.Sprintf("job %d will run again now\n", id); code != 0 || out != want {
		t.Fatalf("retry --force of an available job: exit %d, stdout %q; want %q", code, out, want)
	}
}
