package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

type laterArgs struct {
	Snooze bool `json:"snooze"`
}

func (laterArgs) Kind() string { return "later" }

// TestRunOneFindsDueScheduledJobs: RunOne, which tests and tools use on a
// worker that is never started (no promoter runs), still runs a scheduled
// job once its time has come, and not before.
func TestRunOneFindsDueScheduledJobs(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	client := pgqueue.New(db.Pool, pgqueue.Config{})
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[laterArgs]) error { return nil })
	w, err := worker.New(client, reg, worker.Config{Queues: map[string]int{"default": 1}})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(time.Second)
	res, err := client.Insert(ctx, laterArgs{}, &queue.InsertOpts{ScheduledAt: at})
	if err != nil {
		t.Fatal(err)
	}
	// A job run before its time is the failure; on a machine so loaded
	// that the insert and the call took past it, running it was right.
	if ran, err := w.RunOne(ctx, "default"); !errors.Is(err, worker.ErrNoJob) && time.Now().Before(at) {
		t.Fatalf("RunOne before the job's time: %+v, %v, want ErrNoJob", ran, err)
	} else if err == nil {
		t.Logf("the machine took past the job's time before RunOne returned; it ran: %+v", ran)
		return
	}
	time.Sleep(time.Until(at) + 50*time.Millisecond)
	ran, err := w.RunOne(ctx, "default")
	if err != nil || ran.Job.ID != res.ID || ran.Outcome != queue.OutcomeComplete {
		t.Fatalf("RunOne after the job's time: %+v, %v; want job %d completed", ran, err, res.ID)
	}
	if s := w.Stats(); s.Promoted != 1 {
		t.Fatalf("stats %+v; want the job promoted once", s)
	}
}

// TestStartedWorkerRunsScheduledAndSnoozedJobs: a started worker runs a
// job scheduled for later soon after its time, and a job its handler
// snoozed once the snooze is over, through its own promoter, without
// LISTEN (poll-only, with a poll far longer than the wait): the promoter
// wakes the worker's own fetch loops.
func TestStartedWorkerRunsScheduledAndSnoozedJobs(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	client := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger(), PollOnly: true})
	var runs atomic.Int64
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[laterArgs]) error {
		if runs.Add(1) == 1 && job.Args.Snooze {
			return worker.JobSnooze(300 * time.Millisecond)
		}
		return nil
	})
	snoozed, err := client.Insert(ctx, laterArgs{Snooze: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	scheduled, err := client.Insert(ctx, laterArgs{}, &queue.InsertOpts{ScheduledAt: time.Now().Add(300 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	// The first claim takes the snoozed job; after a claim that found jobs
	// the next poll is PollInterval/16 (3.75s) away, and there is no
	// LISTEN: only promotions wake the loop sooner.
	start := time.Now()
	w := startWorker(t, client, reg, worker.Config{PollInterval: time.Minute, PromoteInterval: 100 * time.Millisecond})
	testwatch.WaitFor(t, 10*time.Second, "both jobs to complete", func() bool {
		return stateOf(t, client, scheduled.ID).State == queue.StateCompleted && stateOf(t, client, snoozed.ID).State == queue.StateCompleted
	})
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("the jobs completed %s after the start; a promotion should have woken the worker within about 0.5s", took)
	}
	if j := stateOf(t, client, scheduled.ID); j.AttemptedAt.Before(j.ScheduledAt) {
		t.Fatalf("the scheduled job ran at %v, before its time %v", j.AttemptedAt, j.ScheduledAt)
	}
	if j := stateOf(t, client, snoozed.ID); runs.Load() != 3 || j.Attempt != 1 {
		t.Fatalf("handler ran %d times, snoozed job's attempt %d; want 3 runs (a snooze, its return, the scheduled job), the snooze on one attempt", runs.Load(), j.Attempt)
	}
	if s := w.Stats(); s.Promoted < 2 || s.Snoozed != 1 {
		t.Fatalf("stats %+v; want both jobs promoted and one snooze", s)
	}
}
