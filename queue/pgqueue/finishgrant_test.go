package pgqueue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/sqlfreeze"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// finishHeld completes jobs as a worker does: each Finish names the limit
// partition its claim gave, so that the grant goes with the completions.
func finishHeld(t *testing.T, c *pgqueue.Client, jobs ...*queue.Job) {
	t.Helper()
	fs := make([]queue.Finish, len(jobs))
	for i, j := range jobs {
		fs[i] = queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeComplete, Limit: j.Limit, LimitPartition: j.LimitPartition}
	}
	stale, err := c.Finish(context.Background(), fs)
	if err != nil || len(stale) > 0 {
		t.Fatalf("Finish = %v stale, %v", stale, err)
	}
}

// overLimit fails t if a partition of queue q has more than limit jobs
// holding its slots (available or running).
func overLimit(t *testing.T, db *pgtest.DB, q string, limit int) {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), `SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM jobfence_jobs
		WHERE queue = $1 AND state IN ('available', 'running') GROUP BY limit_part) p`, q).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n > limit {
		t.Fatalf("a partition of %q has %d jobs holding its slots, its limit is %d", q, n, limit)
	}
}

// partitionedRunning limits queue q to one job at once per partition of
// the args' field p, inserts 2 jobs in each of 3 partitions, and claims
// the 3 that the limit lets run.
func partitionedRunning(t *testing.T, c *pgqueue.Client, q string) []*queue.Job {
	t.Helper()
	setLimit(t, c, pgqueue.Limit{Name: q, Queue: q, PartitionBy: []string{"p"}, Concurrency: 1})
	for i := range 6 {
		if _, err := c.Enqueue(context.Background(), queue.EnqueueParams{Kind: "k", Queue: q, Args: fmt.Appendf(nil, `{"p": %d}`, i%3)}); err != nil {
			t.Fatal(err)
		}
	}
	running := claim(t, c, q, 10, time.Minute)
	if len(running) != 3 {
		t.Fatalf("claimed %d jobs, want one per partition, 3", len(running))
	}
	return running
}

// TestFinishGrantsInItsRoundTrip: a claim tells the worker each job's
// limit partition, and a Finish that names it sends the grant of the slot
// it frees in the completion's batch. The completer is frozen as soon as
// the batch is sent, so that it sends nothing else: the next jobs become
// available all the same (the server ran the grant, and committed it
// without the client), its backend is left idle with no lock, no
// partition goes over its limit, and, thawed, its Finish reports the
// completions applied.
func TestFinishGrantsInItsRoundTrip(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	running := partitionedRunning(t, c, "rt")
	parts := map[string]bool{}
	for _, j := range running {
		if j.Limit != "rt" {
			t.Fatalf("job %d's limit is %q, want rt", j.ID, j.Limit)
		}
		parts[j.LimitPartition] = true
	}
	if !parts["[0]"] || !parts["[1]"] || !parts["[2]"] {
		t.Fatalf("the claimed jobs' partitions are %v, want [0], [1] and [2]", parts)
	}
	a, fz := frozenClient(t, db)
	fz.Arm(sqlfreeze.Point{Match: mentions("SET state = 'completed', finalized_at = now()"), Sent: true, Batch: true})
	type result struct {
		stale []queue.Lease
		err   error
	}
	done := make(chan result, 1)
	go func() {
		fs := make([]queue.Finish, len(running))
		for i, j := range running {
			fs[i] = queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeComplete, Limit: j.Limit, LimitPartition: j.LimitPartition}
		}
		stale, err := a.Finish(ctx, fs)
		done <- result{stale, err}
	}()
	pid := fz.Frozen(t, freezeWithin)
	var next []*queue.Job
	eventually(t, "the frozen completer's grant to make the next jobs available", func() bool {
		next = append(next, claim(t, c, "rt", 10, time.Minute)...)
		return len(next) == 3
	})
	sqlfreeze.WaitIdle(t, db.Pool, pid, freezeWithin)
	overLimit(t, db, "rt", 1)
	for _, j := range running {
		if st := stateOf(t, c, j.ID); st != queue.StateCompleted {
			t.Fatalf("job %d is %s, want completed", j.ID, st)
		}
	}
	fz.Thaw()
	if r := <-done; r.err != nil || len(r.stale) > 0 {
		t.Fatalf("the thawed Finish = %v stale, %v", r.stale, r.err)
	}
	finishHeld(t, c, next...)
	if left := claim(t, c, "rt", 10, time.Minute); len(left) != 0 {
		t.Fatalf("claimed %d jobs after every job ran", len(left))
	}
}

// TestFinishGrantsPartitionsItWasNotTold: a Finish that names no
// partition (Complete, a job claimed before the fields existed) or a
// wrong one still hands the slot it frees on at once: the partitions the
// completion returns are granted after it.
func TestFinishGrantsPartitionsItWasNotTold(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	running := partitionedRunning(t, c, "nt")
	fs := []queue.Finish{
		{Lease: running[0].Lease(), Outcome: queue.OutcomeComplete, Limit: running[0].Limit, LimitPartition: running[0].LimitPartition},
		{Lease: running[1].Lease(), Outcome: queue.OutcomeComplete},
		{Lease: running[2].Lease(), Outcome: queue.OutcomeComplete, Limit: "nt", LimitPartition: "[99]"},
	}
	if stale, err := c.Finish(ctx, fs); err != nil || len(stale) > 0 {
		t.Fatalf("Finish = %v stale, %v", stale, err)
	}
	if next := claim(t, c, "nt", 10, time.Minute); len(next) != 3 {
		t.Fatalf("after the completions claimed %d jobs, want the next of each partition, 3", len(next))
	}
	overLimit(t, db, "nt", 1)
}

// TestFinishAppliesWhenItsGrantTimesOut: a sequence's next job whose row
// another session holds is not handed the slot in the completion's
// transaction; the grant after it, a transaction of its own, waits for
// the row: when it gives up (its bounded wait), the completion stays
// committed and Finish reports it applied; the next grant hands the slot
// on once the row is free.
func TestFinishAppliesWhenItsGrantTimesOut(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	ids, got, tx := heldSequence(t, c, db, "to")
	began := time.Now()
	finishHeld(t, c, got[0])
	if took := time.Since(began); took > 20*time.Second {
		t.Fatalf("the completion took %v beside a held row, want about the grant's 1 s lock_timeout", took)
	}
	if st := stateOf(t, c, ids[0]); st != queue.StateCompleted {
		t.Fatalf("job %d is %s after its grant gave up, want completed", ids[0], st)
	}
	if st := stateOf(t, c, ids[1]); st != queue.StateLimited {
		t.Fatalf("job %d is %s while its row was held, want limited", ids[1], st)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GrantWaiting(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if got := claim(t, c, "to", 10, time.Minute); len(got) != 1 || got[0].ID != ids[1] {
		t.Fatalf("after the holder let go claimed %v, want job %d", got, ids[1])
	}
}

// TestGrantFollowsALimitGivenARate: a client whose grants of a limit went
// to the statement for plain concurrency limits must not go on granting
// it there once the limit has a rate: the completions' grants find the
// rate, the next job gets the one start the rate allows per hour, and the
// job after it waits.
func TestGrantFollowsALimitGivenARate(t *testing.T) {
	c, db := newClient(t)
	l := pgqueue.Limit{Name: "gr", Queue: "gr", Concurrency: 1}
	setLimit(t, c, l)
	ids := enqueueN(t, c, queue.EnqueueParams{Kind: "k", Queue: "gr"}, 4)
	next := func(want int64) []*queue.Job {
		t.Helper()
		got := claim(t, c, "gr", 10, time.Minute)
		if len(got) != 1 || got[0].ID != want {
			t.Fatalf("claimed %v, want job %d alone", got, want)
		}
		return got
	}
	finishHeld(t, c, next(ids[0])...)
	second := next(ids[1])
	// Another instance sets the rate, so that this client learns of it
	// only from its completion's grant.
	l.Rate, l.Period = 1, time.Hour
	setLimit(t, pgqueue.New(db.Pool, pgqueue.Config{}), l)
	// The rate's one slot is free: job 2 started before it existed.
	finishHeld(t, c, second...)
	finishHeld(t, c, next(ids[2])...)
	if got := claim(t, c, "gr", 10, time.Minute); len(got) != 0 {
		t.Fatalf("claimed %d jobs after job %d spent the rate of 1 an hour", len(got), ids[2])
	}
	if st := stateOf(t, c, ids[3]); st != queue.StateLimited {
		t.Fatalf("job %d is %s, want limited until the rate's hour has passed", ids[3], st)
	}
}
