package pgqueue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestGrantReadsNoWaitingJobs EXPLAINs a grant beside 20,000 waiting jobs
// and 30 running ones, with 10 slots free: the rows it reads from the
// jobs table must be the slots' holders and the jobs it grants, never the
// waiting or running jobs at large (a grant that scanned them would cost
// each completion as much as the backlog: the issue's "no scan of running
// or waiting jobs"). It once read 1,000 waiting jobs a grant, locking them
// to release them were the limit deleted, before it looked whether it was.
func TestGrantReadsNoWaitingJobs(t *testing.T) {
	c, db := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const limit, free = 40, 10
	for _, l := range []pgqueue.Limit{
		{Name: "global", Queue: "default", Concurrency: limit},
		{Name: "rate", Queue: "rated", Concurrency: limit, Rate: 1000, Period: time.Hour},
	} {
		t.Run(l.Name, func(t *testing.T) {
			setLimit(t, c, l)
			ps := make([]queue.EnqueueParams, 5000)
			for i := range ps {
				ps[i] = queue.EnqueueParams{Kind: "k", Queue: l.Queue}
			}
			for range 4 {
				if _, err := c.EnqueueMany(ctx, ps); err != nil {
					t.Fatal(err)
				}
			}
			jobs := claim(t, c, l.Queue, limit, time.Hour)
			if len(jobs) != limit {
				t.Fatalf("claimed %d jobs, want the limit's %d", len(jobs), limit)
			}
			// Finish some without the grant that Finish runs after, so
			// that the grant EXPLAINed has slots to hand out.
			ids := make([]int64, free)
			for i, j := range jobs[:free] {
				ids[i] = j.ID
			}
			if _, err := db.Pool.Exec(ctx, `UPDATE jobfence_jobs SET state = 'completed', finalized_at = now() WHERE id = ANY($1)`, ids); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Pool.Exec(ctx, "ANALYZE jobfence_jobs"); err != nil {
				t.Fatal(err)
			}
			// As a statement planned for its parameters, and as a
			// prepared one's generic plan.
			// grantConcurrencySQL serves a limit without a rate.
			stmts := []string{pgqueue.GrantSQL}
			if l.Rate == 0 {
				stmts = append(stmts, pgqueue.GrantConcurrencySQL)
			}
			for _, sql := range stmts {
				for _, mode := range []string{"auto", "force_generic_plan"} {
					explainGrant(t, ctx, db.Pool, sql, l, mode, free, float64(2*limit+4*free))
				}
			}
		})
	}
}

// explainGrant EXPLAINs (ANALYZE) a grant (sql) of l's partition, rolled back,
// with plan_cache_mode mode, and fails t if it made other than free jobs
// available or read more than bound rows of the jobs table: each slot's
// holder probed (twice at most: the free slots' and the count of holders
// above the limit), and each granted job read and locked. (The hand-over
// that a batch of outcomes runs instead, claiming for its worker, has a
// test of its own: TestHandOverReadsOnlyWhatItHands.)
func explainGrant(t *testing.T, ctx context.Context, pool *pgxpool.Pool, sql string, l pgqueue.Limit, mode string, free int, bound float64) {
	t.Helper()
	tx := planTx(t, ctx, pool, mode)
	defer tx.Rollback(ctx)
	var raw []byte
	args := []any{pgx.QueryExecModeDescribeExec, []string{l.Name}, []string{""}, 1000}
	err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args...).Scan(&raw)
	if err != nil {
		t.Fatal(err)
	}
	plan := parsePlan(t, raw)
	var read float64
	plan.walk(func(p planNode) {
		if p.Relation == "jobfence_jobs" && p.Type != "ModifyTable" {
			read += (p.Rows + p.Removed) * p.Loops
		}
	})
	var available int
	if err := tx.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'available') FROM jobfence_jobs WHERE queue = $1`, l.Queue).Scan(&available); err != nil {
		t.Fatal(err)
	}
	if available != free {
		t.Fatalf("plan_cache_mode %s: the grant made %d jobs available, want %d", mode, available, free)
	}
	if read > bound {
		t.Fatalf("plan_cache_mode %s: the grant read %.0f rows of the jobs table, want at most %.0f beside 20,000 waiting jobs; plan:\n%s", mode, read, bound, raw)
	}
}

// TestFairGrantReadsNoBacklog EXPLAINs the grant of a fair limit
// (Limit.FairBy) beside 20,000 waiting jobs of one tenant and one job
// each of 10 others, 40 running, 10 slots free: it must grant the 10
// (round-robin: the big tenant's oldest and 9 others') reading the slots'
// holders, an index entry a key it visits (the free slots and
// fairScanSlack more, from the cursor on and then from the first key)
// and a few jobs of each, never the big tenant's backlog.
func TestFairGrantReadsNoBacklog(t *testing.T) {
	c, db := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const limit, free = 40, 10
	l := pgqueue.Limit{Name: "fair", Queue: "default", Concurrency: limit, FairBy: "tenant"}
	setLimit(t, c, l)
	tenantJobs(t, c, l.Queue, "big", 5000)
	jobs := claim(t, c, l.Queue, limit, time.Hour)
	if len(jobs) != limit {
		t.Fatalf("claimed %d jobs, want the limit's %d", len(jobs), limit)
	}
	for range 3 {
		tenantJobs(t, c, l.Queue, "big", 5000)
	}
	for i := range 10 {
		tenantJobs(t, c, l.Queue, fmt.Sprint("small", i), 1)
	}
	ids := make([]int64, free)
	for i, j := range jobs[:free] {
		ids[i] = j.ID
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE jobfence_jobs SET state = 'completed', finalized_at = now() WHERE id = ANY($1)`, ids); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "ANALYZE jobfence_jobs"); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"auto", "force_generic_plan"} {
		explainGrant(t, ctx, db.Pool, pgqueue.GrantSQL, l, mode, free, float64(2*limit+4*free+6*(free+4)))
	}
}
