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

// TestWorkerRetentionByState: a worker prunes each final state at its own
// retention (RetentionByState over Retention), and makes the finished
// partitions for the completed jobs' retention.
func TestWorkerRetentionByState(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	// A cancelled and a discarded job, each finalized 30 minutes ago.
	ids := map[queue.State]int64{}
	for _, st := range []queue.State{queue.StateCancelled, queue.StateDiscarded} {
		res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "effect", Queue: "idle"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Pool.Exec(ctx, `UPDATE jobfence_jobs SET state = $2, finalized_at = now() - interval '30 minutes' WHERE id = $1`,
			res.ID, st); err != nil {
			t.Fatal(err)
		}
		ids[st] = res.ID
	}
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[effectArgs]) error { return nil })
	startWorker(t, c, reg, worker.Config{Queues: map[string]int{"default": 1}, Retention: time.Hour,
		RetentionByState: queue.Retention{Completed: 6 * time.Hour, Cancelled: 10 * time.Minute},
		PruneInterval:    20 * time.Millisecond, Logger: quietLogger()})
	testwatch.WaitFor(t, time.Minute, "the cancelled job pruned", func() bool {
		_, err := c.Get(ctx, ids[queue.StateCancelled])
		return err != nil
	})
	// Partitions for a 6h retention reach PartitionsAhead(6h) ahead.
	var ahead time.Duration
	if err := db.Pool.QueryRow(ctx, `SELECT extract(epoch FROM hi - now())::bigint * 1000000000 FROM jobfence_finished_bounds`).Scan(&ahead); err != nil {
		t.Fatal(err)
	}
	if want := pgqueue.PartitionsAhead(6 * time.Hour); ahead < want-time.Minute {
		t.Fatalf("partitions made %s ahead, want %s (the completed jobs' retention)", ahead, want)
	}
	// The statement that pruned the cancelled job read the discarded one
	// (as old, past the cancelled retention) too, and kept it for its hour.
	if j, err := c.Get(ctx, ids[queue.StateDiscarded]); err != nil || j.State != queue.StateDiscarded {
		t.Fatalf("the discarded job: %+v, %v; want it kept for its hour", j, err)
	}
}
