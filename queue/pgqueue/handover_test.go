package pgqueue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestHandOverReadsOnlyWhatItHands EXPLAINs the hand-over of the slots
// that k completions free, in their transaction, as a prepared
// statement's generic plan (what a Finish runs) and as a plan for its
// parameters: beside a global limit of 40 with 20,000 waiting jobs (the
// first case, in a table that small), beside 1,000 partitions of a limit
// of 1 with 5,000 waiting jobs, and the same as 1,000 sequences. It must
// claim the k next jobs for the worker and read a few rows of the jobs
// table and of the slots for each, whatever the partitions, slots and
// waiting jobs around them. Two generic plans it had on the way read
// every slot of the limit to find the freed ones, or, for each freed
// slot, every slot of the partition with its holder to find those at or
// above the limit; this test fails with either (docs/benchmarks/limits.md,
// change 11). A third updated the claimed jobs through a hash of the
// whole jobs table while that table was still small (change 13).
func TestHandOverReadsOnlyWhatItHands(t *testing.T) {
	c, db := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name         string
		limit        pgqueue.Limit
		parts, jobs  int
		running, k   int
		partitionArg func(i int) []byte
	}{
		{"a global limit of 40", pgqueue.Limit{Name: "global", Queue: "global", Concurrency: 40}, 1, 20040, 40, 10,
			func(int) []byte { return []byte(`{}`) }},
		{"1,000 partitions of 1", pgqueue.Limit{Name: "parts", Queue: "parts", PartitionBy: []string{"p"}, Concurrency: 1}, 1000, 6000, 1000, 32,
			func(i int) []byte { return fmt.Appendf(nil, `{"p": %d}`, i%1000) }},
		{"1,000 sequences", pgqueue.Limit{Name: "seqs", Queue: "seqs", PartitionBy: []string{"p"}, Concurrency: 1, Sequence: true}, 1000, 6000, 1000, 32,
			func(i int) []byte { return fmt.Appendf(nil, `{"p": %d}`, i%1000) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setLimit(t, c, tc.limit)
			ps := make([]queue.EnqueueParams, tc.jobs)
			for i := range ps {
				ps[i] = queue.EnqueueParams{Kind: "k", Queue: tc.limit.Queue, Args: tc.partitionArg(i)}
			}
			for i := 0; i < len(ps); i += 5000 {
				if _, err := c.EnqueueMany(ctx, ps[i:min(i+5000, len(ps))]); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := c.GrantWaiting(ctx, tc.parts); err != nil {
				t.Fatal(err)
			}
			running := claim(t, c, tc.limit.Queue, tc.running, time.Hour)
			if len(running) != tc.running {
				t.Fatalf("claimed %d jobs, want %d", len(running), tc.running)
			}
			if _, err := db.Pool.Exec(ctx, "ANALYZE jobfence_jobs"); err != nil {
				t.Fatal(err)
			}
			for _, mode := range []string{"force_generic_plan", "auto"} {
				explainHandOver(t, ctx, db, mode, running[:tc.k], tc.limit, 0)
			}
		})
	}
}

// TestHandOverUnderAWideLimit EXPLAINs the hand-over of 10 slots of a
// global limit of 1,000, all held, in a jobs table of its own (the
// running jobs have its lowest IDs). Its check for holders above the
// limit, a join of the partition's slots to their holders, was planned
// as a merge join that walked the primary key through the whole jobs
// table for each freed slot, a cost that grew with the table
// (docs/benchmarks/limits.md, change 15). The check now probes a holder
// only for a slot above the limit. The partition's slots, a table of a
// few pages, may be read whole twice, by the check and by the slots'
// update: the planner's choice by its estimates for a table that small,
// as for one of a page.
func TestHandOverUnderAWideLimit(t *testing.T) {
	c, db := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := pgqueue.Limit{Name: "wide", Queue: "wide", Concurrency: 1000}
	setLimit(t, c, l)
	ps := make([]queue.EnqueueParams, 6000)
	for i := range ps {
		ps[i] = queue.EnqueueParams{Kind: "k", Queue: l.Queue}
	}
	if _, err := c.EnqueueMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	running := claim(t, c, l.Queue, l.Concurrency, time.Hour)
	if len(running) != l.Concurrency {
		t.Fatalf("claimed %d jobs, want %d", len(running), l.Concurrency)
	}
	if _, err := db.Pool.Exec(ctx, "ANALYZE"); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"force_generic_plan", "auto"} {
		explainHandOver(t, ctx, db, mode, running[:10], l, 2*l.Concurrency)
	}
}

// explainHandOver completes jobs in a transaction, as a Finish does, and
// EXPLAINs (ANALYZE) handOverSQL after it with plan_cache_mode mode,
// claiming for "claimer"; then it rolls back. It fails t unless the
// hand-over claimed one job for each completion, left no partition over
// l's concurrency, and read at most four rows of the jobs table and three
// of the slots for each job it handed, and slotsOnce slots more.
func explainHandOver(t *testing.T, ctx context.Context, db *pgtest.DB, mode string, jobs []*queue.Job, l pgqueue.Limit, slotsOnce int) {
	t.Helper()
	tx := planTx(t, ctx, db.Pool, mode)
	defer tx.Rollback(ctx)
	ids := make([]int64, len(jobs))
	names := make([]string, len(jobs))
	parts := make([]string, len(jobs))
	caps := make([]int32, len(jobs))
	for i, j := range jobs {
		ids[i], names[i], parts[i], caps[i] = j.ID, j.Limit, j.LimitPartition, 1
	}
	if _, err := tx.Exec(ctx, `UPDATE jobfence_jobs SET state = 'completed', finalized_at = now(), lease_expires_at = NULL WHERE id = ANY($1)`, ids); err != nil {
		t.Fatal(err)
	}
	var raw []byte
	err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+pgqueue.HandOverSQL, pgx.QueryExecModeDescribeExec,
		names, parts, caps, time.Minute.Microseconds(), "claimer", 16<<10, 32, ids).Scan(&raw)
	if err != nil {
		t.Fatal(err)
	}
	plan := parsePlan(t, raw)
	read := map[string]float64{}
	plan.walk(func(p planNode) {
		if p.Type != "ModifyTable" {
			read[p.Relation] += (p.Rows + p.Removed + p.RemovedJoin) * p.Loops
		}
	})
	var claimed, over int
	if err := tx.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'running' AND 'claimer' = ANY(attempted_by)) FROM jobfence_jobs WHERE queue = $1`,
		l.Queue).Scan(&claimed); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT FROM jobfence_jobs WHERE queue = $1 AND state IN ('available', 'running')
		GROUP BY limit_part HAVING count(*) > $2) o`, l.Queue, l.Concurrency).Scan(&over); err != nil {
		t.Fatal(err)
	}
	k := float64(len(jobs))
	if claimed != len(jobs) || over != 0 {
		t.Fatalf("plan_cache_mode %s: the hand-over claimed %d jobs for %d completions, %d partitions over the limit of %d", mode, claimed, len(jobs), over, l.Concurrency)
	}
	// A table of one page may be read whole: the planner's choice, at
	// the cost of reading one buffer.
	var slotPages int
	if err := tx.QueryRow(ctx, `SELECT pg_relation_size('jobfence_limit_slots') / current_setting('block_size')::int`).Scan(&slotPages); err != nil {
		t.Fatal(err)
	}
	slotsRead := read["jobfence_limit_slots"]
	if slotPages <= 1 {
		slotsRead = 0
	}
	if read["jobfence_jobs"] > 4*k || slotsRead > 3*k+float64(slotsOnce) {
		t.Fatalf("plan_cache_mode %s: the hand-over of %.0f slots read %.0f rows of the jobs table (want at most %.0f) and %.0f of the slots' %d pages (want at most %.0f rows); plan:\n%s",
			mode, k, read["jobfence_jobs"], 4*k, read["jobfence_limit_slots"], slotPages, 3*k+float64(slotsOnce), raw)
	}
}

// TestHandOverLeavesALoweredLimit: a limit of 2 lowered to 1 while both
// its slots are held. The completion of slot 0's holder hands nothing
// over, though its slot is below the new limit: the holder of slot 1,
// above it, must end first (the general grant, which runs after the
// batch for a partition the hand-over left, grants nothing either). Once
// it has, the next job is granted, and never more than one holds.
func TestHandOverLeavesALoweredLimit(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	l := pgqueue.Limit{Name: "lowered", Queue: "lowered", Concurrency: 2}
	setLimit(t, c, l)
	enqueueN(t, c, queue.EnqueueParams{Kind: "k", Queue: l.Queue}, 5)
	running := claim(t, c, l.Queue, 5, time.Minute)
	if len(running) != 2 {
		t.Fatalf("claimed %d jobs, want the limit's 2", len(running))
	}
	var slot0 int64
	if err := db.Pool.QueryRow(ctx, `SELECT id FROM jobfence_jobs WHERE id = ANY($1) AND limit_slot = 0`,
		[]int64{running[0].ID, running[1].ID}).Scan(&slot0); err != nil {
		t.Fatal(err)
	}
	if running[0].ID != slot0 {
		running[0], running[1] = running[1], running[0]
	}
	l.Concurrency = 1
	setLimit(t, c, l)
	holding := func() int {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE queue = $1 AND state IN ('available', 'running')`, l.Queue).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if got := finishClaim(t, c, "w", time.Minute, running[:1], map[int64]bool{running[0].ID: true}); len(got) != 0 || holding() != 1 {
		t.Fatalf("slot 0's completion claimed %d jobs and left %d holding, want none claimed and only slot 1's holder", len(got), holding())
	}
	got := finishClaim(t, c, "w", time.Minute, running[1:], map[int64]bool{running[1].ID: true})
	if n := holding(); n != 1 {
		t.Fatalf("after slot 1's completion %d jobs hold the limit of 1 (claimed %d), want the next one", n, len(got))
	}
}

// TestHandOverKeepsASequenceInOrder: a sequence's completion hands its
// slot to the sequence's next job, claimed for the worker, and to no
// other. With that job's row held by another transaction (as an admin
// command or a grant would hold it), the hand-over hands nothing rather
// than pass over it, as a claim with SKIP LOCKED would, and neither does
// the grant after the batch (grantConcurrencySQL, then grantSQL, which
// waits for the row a second); once the holder lets go, the job gets the
// slot and runs before the ones after it.
func TestHandOverKeepsASequenceInOrder(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	const q = "hs"
	setLimit(t, c, pgqueue.Limit{Name: q, Queue: q, Sequence: true})
	ids := enqueueN(t, c, queue.EnqueueParams{Kind: "k", Queue: q, LimitKey: "a"}, 4)
	got := claim(t, c, q, 10, time.Minute)
	if len(got) != 1 || got[0].ID != ids[0] {
		t.Fatalf("claimed %v, want the sequence's first job %d", got, ids[0])
	}
	next := finishClaim(t, c, "w", time.Minute, got, map[int64]bool{got[0].ID: true})
	if len(next) != 1 || next[0].ID != ids[1] || next[0].State != queue.StateRunning || next[0].Fence <= got[0].Fence {
		t.Fatalf("the first job's completion claimed %v, want job %d running under a newer fence", next, ids[1])
	}
	tx := holdRow(t, db, ids[2])
	// The grant that follows the batch waits for the held row a second
	// at most, and gives up (logged).
	if more := finishClaim(t, c, "w", time.Minute, next, map[int64]bool{next[0].ID: true}); len(more) != 0 {
		t.Fatalf("with job %d's row held, the completion claimed %v, want nothing", ids[2], more)
	}
	for _, id := range ids[2:] {
		if st := stateOf(t, c, id); st != queue.StateLimited {
			t.Fatalf("with job %d's row held, job %d is %s, want limited", ids[2], id, st)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GrantWaiting(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if got := claim(t, c, q, 10, time.Minute); len(got) != 1 || got[0].ID != ids[2] {
		t.Fatalf("after the holder let go claimed %v, want job %d", got, ids[2])
	}
}
