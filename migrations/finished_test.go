package migrations_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestFinishedJobsAcrossTheUpgrade: Up from 16 (completed jobs in the jobs
// table) runs while a fleet completes jobs in place and a transaction
// holds the table, without rewriting the table; afterwards the completed
// jobs already there stay readable and are pruned row by row as before,
// and new completions go to the finished table once a worker's
// maintenance has made its partitions.
func TestFinishedJobsAcrossTheUpgrade(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t, pgtest.Options{NoMigrate: true})
	providerAt(t, db.URL, 16)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO jobfence_jobs (queue, kind, state, attempt, finalized_at)
        SELECT 'old', 'k', 'completed', 1, now() - CASE WHEN i % 2 = 0 THEN interval '2 days' ELSE interval '1 minute' END
        FROM generate_series(1, 1000) AS i`); err != nil {
		t.Fatal(err)
	}
	var before, after uint32
	if err := db.Pool.QueryRow(ctx, `SELECT relfilenode FROM pg_class WHERE oid = 'jobfence_jobs'::regclass`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	m := liveMigrator(t)
	migrateOnALiveFleet(t, db, func(ctx context.Context) error { return m.Up(ctx, db.URL) })
	if err := db.Pool.QueryRow(ctx, `SELECT relfilenode FROM pg_class WHERE oid = 'jobfence_jobs'::regclass`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if before != after {
		t.Fatalf("the jobs table was rewritten (relfilenode %d, then %d)", before, after)
	}

	c := pgqueue.New(db.Pool, pgqueue.Config{})
	if n, err := c.Counts(ctx, "old"); err != nil || n[queue.StateCompleted] != 1000 {
		t.Fatalf("completed jobs from before the upgrade: %v, %v; want 1000", n, err)
	}
	if _, err := c.MaintainFinished(ctx, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: "new"})
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := c.Claim(ctx, queue.ClaimParams{Queue: "new", Limit: 1, Lease: time.Minute, WorkerID: "w"})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %v, %v", jobs, err)
	}
	if err := c.Complete(ctx, jobs[0].Lease()); err != nil {
		t.Fatal(err)
	}
	var moved int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs_finished WHERE id = $1`, res.ID).Scan(&moved); err != nil || moved != 1 {
		t.Fatalf("a job completed after the upgrade: %d rows in the finished table, %v; want 1", moved, err)
	}
	if n, err := c.Prune(ctx, 24*time.Hour, 10_000); err != nil || n != 500 {
		t.Fatalf("prune after the upgrade: %d, %v; want the 500 old completed jobs gone", n, err)
	}
	if n, err := c.Counts(ctx, "old"); err != nil || n[queue.StateCompleted] != 500 {
		t.Fatalf("completed jobs kept after prune: %v, %v; want the 500 recent ones", n, err)
	}
	if list, err := c.List(ctx, pgqueue.ListParams{State: queue.StateCompleted, Limit: 1}); err != nil || len(list) != 1 || list[0].ID != res.ID {
		t.Fatalf("newest completed job: %v, %v; want job %d from the finished table", list, err, res.ID)
	}
}
