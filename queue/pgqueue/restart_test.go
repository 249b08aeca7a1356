package pgqueue_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// The tests of this file drive a job under a limit out of running and
// back (a snooze, a put-back, a due retry, a rescue that gives the attempt
// back) and check what the state machine says each of those keeps and
// frees (docs/states.md): a restart goes through a grant, so it takes a
// rate slot and counts a lowered limit, and a wait keeps a sequence's turn.

// outcome applies o to j with delay d and fails on a stale lease.
func outcome(t *testing.T, c *pgqueue.Client, j *queue.Job, o queue.Outcome, d time.Duration) {
	t.Helper()
	f := queue.Finish{Lease: j.Lease(), Outcome: o, Delay: d}
	if o == queue.OutcomeRetry {
		f.Error = &queue.AttemptError{Error: "boom"}
	}
	if stale, err := c.Finish(context.Background(), []queue.Finish{f}); err != nil || len(stale) != 0 {
		t.Fatalf("finish job %d with outcome %d: stale %v, %v", j.ID, o, stale, err)
	}
}

// promoteAndGrant runs a worker's maintenance tick: due jobs promoted,
// then the grant pass.
func promoteAndGrant(t *testing.T, c *pgqueue.Client) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Promote(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GrantWaiting(ctx, 100); err != nil {
		t.Fatal(err)
	}
}

// claimIDs claims up to 10 jobs of q and returns them.
func claimIDs(t *testing.T, c *pgqueue.Client, q string) []*queue.Job {
	t.Helper()
	return claim(t, c, q, 10, time.Minute)
}

// TestSnoozeKeepsASequenceInOrder: a sequence's job snoozed with a delay
// (JobSnooze, an unknown kind's put-back, an outage put-back) keeps the
// sequence's turn while it waits, so the next job does not run first; a
// FailureHold limit keeps its slot the same way. Once the snooze is due,
// the snoozed job runs before the next one.
func TestSnoozeKeepsASequenceInOrder(t *testing.T) {
	c, _ := newClient(t)
	for _, l := range []pgqueue.Limit{
		{Name: "seq", Queue: "seq", Sequence: true},
		{Name: "hold", Queue: "hold", Concurrency: 1, OnFailure: pgqueue.FailureHold},
	} {
		setLimit(t, c, l)
		ids := enqueueN(t, c, queue.EnqueueParams{Kind: "k", Queue: l.Queue}, 2)
		got := claimIDs(t, c, l.Queue)
		if len(got) != 1 || got[0].ID != ids[0] {
			t.Fatalf("%s: claimed %v, want job %d alone", l.Name, got, ids[0])
		}
		outcome(t, c, got[0], queue.OutcomeSnooze, 300*time.Millisecond)
		promoteAndGrant(t, c)
		if got := claimIDs(t, c, l.Queue); len(got) != 0 {
			t.Fatalf("%s: while job %d is snoozed, claimed %v: the next job overtook it", l.Name, ids[0], got)
		}
		if st := stateOf(t, c, ids[1]); st != queue.StateLimited {
			t.Fatalf("%s: the second job is %s while the first is snoozed, want limited", l.Name, st)
		}
		time.Sleep(350 * time.Millisecond)
		promoteAndGrant(t, c)
		got = claimIDs(t, c, l.Queue)
		if len(got) != 1 || got[0].ID != ids[0] {
			t.Fatalf("%s: after the snooze claimed %v, want the snoozed job %d", l.Name, got, ids[0])
		}
	}
}

// TestPromotedRetryTakesARateSlot: a held retry under a rate limit starts
// again only with a rate slot of its own. Promoted straight to available
// with the concurrency slot it kept, it started twice within the period.
func TestPromotedRetryTakesARateSlot(t *testing.T) {
	c, _ := newClient(t)
	setLimit(t, c, pgqueue.Limit{Name: "r", Queue: "r", Concurrency: 1, OnFailure: pgqueue.FailureHold, Rate: 1, Period: time.Hour})
	id := enqueueN(t, c, queue.EnqueueParams{Kind: "k", Queue: "r", MaxAttempts: 5}, 1)[0]
	got := claimIDs(t, c, "r")
	if len(got) != 1 {
		t.Fatalf("claimed %v, want job %d", got, id)
	}
	outcome(t, c, got[0], queue.OutcomeRetry, time.Millisecond)
	time.Sleep(10 * time.Millisecond)
	requireWaiting(t, c, "r", id, "the due retry")
}

// requireWaiting runs a maintenance tick and fails unless no job of q can
// be claimed and job id (what) waits, limited, for a grant.
func requireWaiting(t *testing.T, c *pgqueue.Client, q string, id int64, what string) {
	t.Helper()
	promoteAndGrant(t, c)
	if got := claimIDs(t, c, q); len(got) != 0 {
		t.Fatalf("%s started again within the rate's period: claimed %v", what, got)
	}
	if st := stateOf(t, c, id); st != queue.StateLimited {
		t.Fatalf("%s is %s, want limited (waiting for a rate slot)", what, st)
	}
}

// TestPutBackTakesARateSlot: a put-back without a delay (a stopping
// worker's) and a rescue that gives the attempt back (the server
// restarted under the job) make the job ready again, and it starts again
// only through a grant that takes a rate slot.
func TestPutBackTakesARateSlot(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	setLimit(t, c, pgqueue.Limit{Name: "p", Queue: "p", Rate: 1, Period: time.Hour})
	id := enqueueN(t, c, queue.EnqueueParams{Kind: "k", Queue: "p"}, 1)[0]
	got := claimIDs(t, c, "p")
	if len(got) != 1 {
		t.Fatalf("claimed %v, want job %d", got, id)
	}
	outcome(t, c, got[0], queue.OutcomeSnooze, 0)
	requireWaiting(t, c, "p", id, "a put-back job")

	// The rescue's give-back: a job claimed before the server's start.
	setLimit(t, c, pgqueue.Limit{Name: "g", Queue: "g", Rate: 1, Period: time.Hour})
	id = enqueueN(t, c, queue.EnqueueParams{Kind: "k", Queue: "g"}, 1)[0]
	if got := claimIDs(t, c, "g"); len(got) != 1 {
		t.Fatalf("claimed %v, want job %d", got, id)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE jobfence_jobs SET attempted_at = pg_postmaster_start_time() - interval '1 second',
		lease_expires_at = now() - interval '1 second' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Rescue(ctx, queue.RescueParams{Limit: 10}); err != nil || n != 1 {
		t.Fatalf("Rescue = %d, %v; want the job given back", n, err)
	}
	requireWaiting(t, c, "g", id, "a job given back by the rescue")
}

// TestPromotedRetriesKeepALoweredLimit: two retries holding the slots of
// a limit of 2 that is lowered to 1 meanwhile restart one at a time. The
// promoter made each available with its own slot, so both ran at once.
func TestPromotedRetriesKeepALoweredLimit(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	l := pgqueue.Limit{Name: "low", Queue: "low", Concurrency: 2, OnFailure: pgqueue.FailureHold}
	setLimit(t, c, l)
	ids := enqueueN(t, c, queue.EnqueueParams{Kind: "k", Queue: "low", MaxAttempts: 5}, 2)
	got := claimIDs(t, c, "low")
	if len(got) != 2 {
		t.Fatalf("claimed %v, want both jobs %v", got, ids)
	}
	for _, j := range got {
		outcome(t, c, j, queue.OutcomeRetry, 200*time.Millisecond)
	}
	l.Concurrency = 1
	setLimit(t, c, l)
	time.Sleep(250 * time.Millisecond)
	promoteAndGrant(t, c)
	got = claimIDs(t, c, "low")
	if len(got) != 1 {
		t.Fatalf("claimed %d of the two retries under a limit lowered to 1", len(got))
	}
	var running int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE queue = 'low' AND state = 'running'`).Scan(&running); err != nil {
		t.Fatal(err)
	}
	if running != 1 {
		t.Fatalf("%d jobs running under a limit of 1", running)
	}
	complete(t, c, got...)
	promoteAndGrant(t, c)
	if got := claimIDs(t, c, "low"); len(got) != 1 {
		t.Fatalf("after the first completed, claimed %v, want the other retry", got)
	}
}

// TestLoweredLimitTakesBackUnstartedSlots: jobs granted slots before a
// limit was lowered, not started yet, wait again if their slot is at or
// above the new value (a concurrency slot, or a rate slot): they started
// after SetLimit returned, above the new limit.
func TestLoweredLimitTakesBackUnstartedSlots(t *testing.T) {
	c, _ := newClient(t)
	for _, l := range []pgqueue.Limit{
		{Name: "conc", Queue: "conc", Concurrency: 2},
		{Name: "rate", Queue: "rate", Rate: 2, Period: time.Hour},
	} {
		setLimit(t, c, l)
		ids := enqueueN(t, c, queue.EnqueueParams{Kind: "k", Queue: l.Queue}, 2)
		for _, id := range ids {
			if st := stateOf(t, c, id); st != queue.StateAvailable {
				t.Fatalf("%s: job %d is %s before the limit is lowered, want available", l.Name, id, st)
			}
		}
		if l.Concurrency > 0 {
			l.Concurrency = 1
		} else {
			l.Rate = 1
		}
		setLimit(t, c, l)
		if got := claimIDs(t, c, l.Queue); len(got) != 1 {
			t.Fatalf("%s: claimed %d jobs after the limit was lowered to 1", l.Name, len(got))
		}
	}
}

// TestLoweredLimitCountsTheHoldersNotTheSlots: a limit of 2 lowered to 1
// while a job runs on slot 1 and a job not yet started holds slot 0: the
// unstarted one waits again, though its slot is below the new limit
// (found by the model test: it started beside the running one).
func TestLoweredLimitCountsTheHoldersNotTheSlots(t *testing.T) {
	c, _ := newClient(t)
	l := pgqueue.Limit{Name: "order", Queue: "order", Concurrency: 2}
	setLimit(t, c, l)
	ids := enqueueN(t, c, queue.EnqueueParams{Kind: "k", Queue: "order"}, 2)
	got := claimIDs(t, c, "order")
	if len(got) != 2 {
		t.Fatalf("claimed %v, want both jobs %v", got, ids)
	}
	third := enqueueN(t, c, queue.EnqueueParams{Kind: "k", Queue: "order"}, 1)[0]
	first := got[0]
	if got[1].ID < first.ID {
		first = got[1]
	}
	complete(t, c, first)
	promoteAndGrant(t, c)
	if st := stateOf(t, c, third); st != queue.StateAvailable {
		t.Fatalf("the third job is %s after the first completed, want available with its slot", st)
	}
	l.Concurrency = 1
	setLimit(t, c, l)
	if got := claimIDs(t, c, "order"); len(got) != 0 {
		t.Fatalf("claimed %v beside the running job under a limit lowered to 1", got)
	}
	if st := stateOf(t, c, third); st != queue.StateLimited {
		t.Fatalf("the third job is %s, want limited again", st)
	}
}
