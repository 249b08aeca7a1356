package pgqueue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// releaseDependents is how many dependents the task released in the
// release cost measurements has.
const releaseDependents = 3

// releaseSetup inserts, through c, a workflow of size tasks in which the
// task "hub" has releaseDependents pending dependents (the others form a
// chain from a root of their own), after unrelated completed jobs, and
// returns hub's ID.
func releaseSetup(ctx context.Context, tb testing.TB, c *pgqueue.Client, db *pgtest.DB, size, unrelated int) int64 {
	tb.Helper()
	if unrelated > 0 {
		if _, err := db.Pool.Exec(ctx, `
INSERT INTO jobfence_jobs (queue, kind, state, finalized_at)
SELECT 'other', 'k', 'completed', now() FROM generate_series(1, $1)`, unrelated); err != nil {
			tb.Fatal(err)
		}
	}
	p := queue.WorkflowParams{Name: "cost", Tasks: []queue.WorkflowTask{task("hub", "cost")}}
	for i := range releaseDependents {
		p.Tasks = append(p.Tasks, task(fmt.Sprintf("dep-%d", i), "cost", "hub"))
	}
	prev := ""
	for i := len(p.Tasks); i < size; i++ {
		name := fmt.Sprintf("other-%d", i)
		if prev == "" {
			p.Tasks = append(p.Tasks, task(name, "cost2"))
		} else {
			p.Tasks = append(p.Tasks, task(name, "cost2", prev))
		}
		prev = name
	}
	res, err := c.InsertWorkflow(ctx, p)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `VACUUM ANALYZE jobfence_jobs`); err != nil {
		tb.Fatal(err)
	}
	return res.Tasks["hub"]
}

// releaseOnce completes hub in a transaction, runs the release of its
// dependents under EXPLAIN (ANALYZE, BUFFERS), and rolls back; it returns
// the buffers the release read or wrote and how long the server took.
func releaseOnce(ctx context.Context, tb testing.TB, db *pgtest.DB, hub int64) (buffers int64, took time.Duration) {
	tb.Helper()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `UPDATE jobfence_jobs SET state = 'completed', finalized_at = now() WHERE id = $1`, hub); err != nil {
		tb.Fatal(err)
	}
	var raw []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+pgqueue.ReleaseSQL,
		pgx.QueryExecModeDescribeExec, []int64{hub}, "wake").Scan(&raw); err != nil {
		tb.Fatal(err)
	}
	var plan []struct {
		Plan struct {
			Hit     int64 `json:"Shared Hit Blocks"`
			Read    int64 `json:"Shared Read Blocks"`
			Dirtied int64 `json:"Shared Dirtied Blocks"`
		}
		Execution float64 `json:"Execution Time"`
	}
	if err := json.Unmarshal(raw, &plan); err != nil || len(plan) != 1 {
		tb.Fatalf("EXPLAIN output %.300s: %v", raw, err)
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE state = 'available' AND queue = 'cost'`).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	if n != releaseDependents {
		tb.Fatalf("the release made %d dependents available, want %d", n, releaseDependents)
	}
	return plan[0].Plan.Hit + plan[0].Plan.Read, time.Duration(plan[0].Execution * float64(time.Millisecond))
}

// TestReleaseCostIndependentOfSize: releasing a task's dependents reads
// as many buffers in a workflow of 10,000 tasks beside 100,000 unrelated
// jobs as in a workflow of 10 tasks alone, give or take the extra level
// of each B-tree: the release probes the primary key once per dependent
// (and the indexes its updates write), whatever the size of the workflow
// or of the table. Buffers, unlike times, do not depend on the machine's
// load.
func TestReleaseCostIndependentOfSize(t *testing.T) {
	ctx := context.Background()
	measure := func(size, unrelated int) int64 {
		c, db := newClient(t)
		hub := releaseSetup(ctx, t, c, db, size, unrelated)
		b, _ := releaseOnce(ctx, t, db, hub)
		return b
	}
	small := measure(10, 0)
	large := measure(10_000, 100_000)
	t.Logf("buffers of a release of %d dependents: %d in a workflow of 10 tasks, %d in one of 10,000 beside 100,000 jobs",
		releaseDependents, small, large)
	// Each B-tree a release reads or writes (the primary key and the
	// indexes of the updated rows, about 5) may be up to 2 levels deeper
	// in the large table, for each of the 4 rows (the task and its 3
	// dependents): 40 buffers. A release that scanned the workflow or the
	// table would read hundreds (10,000 tasks are 500 pages or more).
	if large > small+40 {
		t.Fatalf("a release read %d buffers in the large table against %d in the small one: it grows with the table", large, small)
	}
}

// BenchmarkReleaseCost times the release of a task's releaseDependents
// dependents (the server's execution time, from EXPLAIN ANALYZE, in a
// transaction rolled back after each) in a workflow of 10 tasks, in one of
// 10,000, and in one of 10 beside a million unrelated jobs; see
// docs/benchmarks/workflows.md.
func BenchmarkReleaseCost(b *testing.B) {
	for _, tt := range []struct {
		name            string
		size, unrelated int
	}{
		{"workflow-10", 10, 0},
		{"workflow-10000", 10_000, 0},
		{"workflow-10+1M-jobs", 10, 1_000_000},
	} {
		b.Run(tt.name, func(b *testing.B) {
			ctx := context.Background()
			db := pgtest.New(b)
			c := pgqueue.New(db.Pool, pgqueue.Config{})
			hub := releaseSetup(ctx, b, c, db, tt.size, tt.unrelated)
			var server time.Duration
			var buffers int64
			n := 0
			for b.Loop() {
				bu, took := releaseOnce(ctx, b, db, hub)
				server += took
				buffers += bu
				n++
			}
			b.ReportMetric(float64(server.Microseconds())/float64(n), "server-µs/release")
			b.ReportMetric(float64(buffers)/float64(n), "buffers/release")
		})
	}
}
