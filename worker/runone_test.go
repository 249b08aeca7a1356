package worker_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

type runOneArgs struct {
	Fail bool `json:"fail"`
}

func (runOneArgs) Kind() string { return "run_one" }

func TestRunOneRunsOneJobAndRecordsItsOutcome(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	client := pgqueue.New(db.Pool, pgqueue.Config{})
	errBoom := errors.New("boom")
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[runOneArgs]) error {
		if job.Args.Fail {
			return errBoom
		}
		return nil
	})
	w, err := worker.New(client, reg, worker.Config{Queues: map[string]int{"default": 1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.RunOne(ctx, "default"); !errors.Is(err, worker.ErrNoJob) {
		t.Fatalf("RunOne on an empty queue: %v, want ErrNoJob", err)
	}
	for _, a := range []runOneArgs{{Fail: true}, {}} {
		if _, err := client.Insert(ctx, a, nil); err != nil {
			t.Fatal(err)
		}
	}
	ran, err := w.RunOne(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	if ran.Outcome != queue.OutcomeRetry || !errors.Is(ran.Err, errBoom) || ran.Stale || ran.Job.Fence == 0 {
		t.Fatalf("first job: %+v; want a fenced retry with the handler's error", ran)
	}
	stored, err := client.Get(ctx, ran.Job.ID)
	if err != nil || stored.State != queue.StateRetryable || len(stored.Errors) != 1 {
		t.Fatalf("first job stored as %+v (%v); want retryable with its error recorded", stored, err)
	}
	ran, err = w.RunOne(ctx, "default")
	if err != nil || ran.Outcome != queue.OutcomeComplete || ran.Err != nil {
		t.Fatalf("second job: %+v, %v; want completed", ran, err)
	}
	if s := w.Stats(); s.Claimed != 2 || s.Completed != 1 || s.Retried != 1 {
		t.Fatalf("stats %+v; want 2 claimed, 1 completed, 1 retried", s)
	}

	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(ctx)
	if _, err := w.RunOne(ctx, "default"); !errors.Is(err, worker.ErrStarted) {
		t.Fatalf("RunOne on a started worker: %v, want ErrStarted", err)
	}
}
