package scheduler_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/scheduler"
)

// heldSchedule is a per-second schedule, name, on the queue of the same
// name, started on a schema of its own, whose first fire's job the test
// has claimed and holds.
type heldSchedule struct {
	db     *pgtest.DB
	client *pgqueue.Client
	rec    *recorder
	s      *scheduler.Scheduler
	first  *queue.Job
}

func startHeld(t *testing.T, name string, skip bool) heldSchedule {
	t.Helper()
	h := heldSchedule{db: pgtest.New(t), rec: newRecorder()}
	h.client = pgqueue.New(h.db.Pool, pgqueue.Config{Logger: quiet})
	h.s = scheduler.New(h.client, scheduler.Config{Logger: quiet, OnFire: h.rec.onFire(0)})
	if err := h.s.Add(name, "* * * * * *", name, nil, scheduler.Options{Queue: name, SkipIfRunning: skip}); err != nil {
		t.Fatal(err)
	}
	start(t, h.s)
	testwatch.WaitFor(t, time.Minute, "the first job to be claimed", func() bool {
		got, err := h.client.Claim(context.Background(), queue.ClaimParams{Queue: name, Limit: 1, Lease: time.Hour, WorkerID: "test"})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 1 {
			h.first = got[0]
		}
		return h.first != nil
	})
	return h
}

// TestSkipIfRunning holds the first fire's job running and shows which
// later fires run: all of them by default, none while it runs with
// SkipIfRunning (each skipped fire is a cancelled job saying why).
func TestSkipIfRunning(t *testing.T) {
	t.Parallel()
	for _, skip := range []bool{false, true} {
		t.Run(fmt.Sprintf("SkipIfRunning=%v", skip), func(t *testing.T) {
			t.Parallel()
			h := startHeld(t, "slow", skip)
			db, client, rec, s, running := h.db, h.client, h.rec, h.s, h.first
			ctx := context.Background()
			testwatch.WaitFor(t, time.Minute, "three fires while the first job runs", func() bool {
				return rec.insertedAfter(0, running.ScheduledAt) >= 3
			})
			if err := client.Complete(ctx, running.Lease()); err != nil {
				t.Fatal(err)
			}
			completed := time.Now()
			testwatch.WaitFor(t, time.Minute, "two fires after the first job completed", func() bool {
				return rec.insertedAfter(0, completed) >= 2
			})
			stop(t, s)

			all := jobs(t, db.Pool)
			checkOnePerFire(t, "slow", all)
			reason := fmt.Sprintf("skipped: job %d of an earlier fire of schedule \"slow\" has not finished (SkipIfRunning)", running.ID)
			var afterCompletion int
			for _, j := range all {
				if !j.At.After(running.ScheduledAt) {
					continue
				}
				wantSkipped := skip
				if j.At.After(completed) {
					afterCompletion++
					// The first fire after completion runs; it waits
					// unclaimed, so it is unfinished and skips the next.
					wantSkipped = skip && afterCompletion > 1
				}
				switch {
				case !wantSkipped && j.State == "cancelled":
					t.Errorf("fire %v was skipped (%s), want it enqueued", j.At, j.Error)
				case wantSkipped && j.State != "cancelled":
					t.Errorf("fire %v is %s, want it skipped while job %d runs", j.At, j.State, running.ID)
				case wantSkipped && j.At.Before(completed) && j.Error != reason:
					t.Errorf("fire %v error %q, want %q", j.At, j.Error, reason)
				}
			}
			for _, f := range rec.inserted(0) {
				if f.Skipped != (lookup(all, f.At).State == "cancelled") {
					t.Errorf("fire %v reported Skipped=%v but its job is %s", f.At, f.Skipped, lookup(all, f.At).State)
				}
			}
		})
	}
}

// TestSkipIfRunningAfterRescheduled moves the first fire's job past later
// fires, as a retry or a snooze does: it is still an earlier fire, so every
// later fire is skipped while it waits.
func TestSkipIfRunningAfterRescheduled(t *testing.T) {
	t.Parallel()
	for _, outcome := range []queue.Outcome{queue.OutcomeRetry, queue.OutcomeSnooze} {
		t.Run(outcome.String(), func(t *testing.T) {
			t.Parallel()
			h := startHeld(t, "flaky", true)
			db, client, rec, s, first := h.db, h.client, h.rec, h.s, h.first
			ctx := context.Background()
			stale, err := client.Finish(ctx, []queue.Finish{{
				Lease: first.Lease(), Outcome: outcome, Delay: time.Hour,
				Error: &queue.AttemptError{Attempt: first.Attempt, At: time.Now(), Error: "boom"},
			}})
			if err != nil || len(stale) != 0 {
				t.Fatalf("Finish: stale %v, %v", stale, err)
			}
			finished := time.Now()
			testwatch.WaitFor(t, time.Minute, "three fires after the first job was rescheduled", func() bool {
				return rec.insertedAfter(0, finished) >= 3
			})
			stop(t, s)

			j, err := client.Get(ctx, first.ID)
			if err != nil {
				t.Fatal(err)
			}
			if j.State.Final() || !j.ScheduledAt.After(finished) {
				t.Fatalf("first job is %s at %v, want it waiting an hour", j.State, j.ScheduledAt)
			}
			// The first job's scheduled_at moved: the others are one per fire.
			all := slices.DeleteFunc(jobs(t, db.Pool), func(j storedJob) bool { return j.Key == first.UniqueKey })
			checkOnePerFire(t, "flaky", all)
			reason := fmt.Sprintf("skipped: job %d of an earlier fire of schedule \"flaky\" has not finished (SkipIfRunning)", first.ID)
			for _, f := range rec.inserted(0) {
				if !f.At.After(first.ScheduledAt) {
					continue
				}
				got := lookup(all, f.At)
				if !f.Skipped || got.State != "cancelled" || got.Error != reason {
					t.Errorf("fire %v: Skipped=%v, job %s with error %q; want it skipped with %q", f.At, f.Skipped, got.State, got.Error, reason)
				}
			}
		})
	}
}
