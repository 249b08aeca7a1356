package worker_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/logbuf"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// TestWorkerKeepsFinishedJobsInPartitions: a worker makes the
// finished-jobs partitions as it starts, not a prune interval later, and
// the jobs it completes then move out of the jobs table; a worker whose
// retention is too short for partitions says so once and leaves its
// finished jobs to the pruner.
func TestWorkerKeepsFinishedJobsInPartitions(t *testing.T) {
	ctx := context.Background()
	count := func(db *pgtest.DB, q string) (n int) {
		if err := db.Pool.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	run := func(db *pgtest.DB, retention, pruneInterval time.Duration, logs *logbuf.Buffer) *pgqueue.Client {
		c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
		reg := worker.NewRegistry()
		worker.Add(reg, func(ctx context.Context, job *worker.Job[effectArgs]) error { return nil })
		startWorker(t, c, reg, worker.Config{Queues: map[string]int{"default": 4}, Retention: retention,
			PruneInterval: pruneInterval, Logger: slog.New(slog.NewTextHandler(logs, nil))})
		return c
	}

	db := pgtest.New(t)
	// The first prune is half an interval or more away: only the pass at
	// the start can make the partitions.
	c := run(db, time.Hour, time.Hour, &logbuf.Buffer{})
	testwatch.WaitFor(t, time.Minute, "partitions for finished jobs", func() bool {
		return count(db, `SELECT count(*) FROM jobfence_finished_bounds WHERE hi > now() + interval '59 minutes'`) == 1
	})
	if _, err := c.EnqueueMany(ctx, []queue.EnqueueParams{{Kind: "effect"}, {Kind: "effect"}, {Kind: "effect"}}); err != nil {
		t.Fatal(err)
	}
	testwatch.WaitFor(t, time.Minute, "three jobs in the finished table", func() bool {
		return count(db, `SELECT count(*) FROM jobfence_jobs_finished`) == 3
	})
	if n := count(db, `SELECT count(*) FROM jobfence_jobs`); n != 0 {
		t.Fatalf("%d jobs left in the jobs table", n)
	}

	short := pgtest.New(t)
	logs := &logbuf.Buffer{}
	c = run(short, 30*time.Second, 20*time.Millisecond, logs)
	testwatch.WaitFor(t, time.Minute, "the worker saying finished jobs stay", func() bool {
		return strings.Contains(logs.String(), "finished jobs stay in the jobs table")
	})
	if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "effect"}); err != nil {
		t.Fatal(err)
	}
	testwatch.WaitFor(t, time.Minute, "the job completed", func() bool {
		return count(short, `SELECT count(*) FROM jobfence_jobs WHERE state = 'completed'`) == 1
	})
	if n := strings.Count(logs.String(), "finished jobs stay in the jobs table"); n != 1 {
		t.Fatalf("the short retention was logged %d times, want once:\n%s", n, logs)
	}
	if n := count(short, `SELECT count(*) FROM jobfence_finished_bounds`); n != 0 {
		t.Fatalf("partitions made for a 30s retention")
	}
}
