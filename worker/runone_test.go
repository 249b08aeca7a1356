package worker_test

import (
	"context"
	"errors"
	"slices"
	"sync"
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
	// RunOne's claims reach the Claim hook as a fetch loop's do, the
	// empty one included.
	var mu sync.Mutex
	var claims []worker.ClaimInfo
	cfg := worker.Config{Queues: map[string]int{"default": 1}}
	cfg.Hooks.Claim = func(_ context.Context, c worker.ClaimInfo) {
		mu.Lock()
		defer mu.Unlock()
		claims = append(claims, c)
	}
	w, err := worker.New(client, reg, cfg)
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
	mu.Lock()
	got := slices.Clone(claims)
	mu.Unlock()
	if len(got) != 3 || got[0].Jobs != 0 || got[1].Jobs != 1 || got[2].Jobs != 1 {
		t.Fatalf("the Claim hook saw %+v; want RunOne's three claims: none, then one job twice", got)
	}
	for _, c := range got {
		if c.Queue != "default" || c.Err != nil || c.Finish {
			t.Fatalf("the Claim hook saw %+v; want claims of queue default, by RunOne, without error", c)
		}
	}

	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(ctx)
	if _, err := w.RunOne(ctx, "default"); !errors.Is(err, worker.ErrStarted) {
		t.Fatalf("RunOne on a started worker: %v, want ErrStarted", err)
	}
}
