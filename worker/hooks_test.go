package worker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

type ctxKey struct{}

// TestHooksAndMiddlewareOnTx: middleware wraps a transactional handler
// (inside its transaction), the handler gets the context JobStart returned,
// and JobEnd reports the committed completion once, with that context.
func TestHooksAndMiddlewareOnTx(t *testing.T) {
	db := pgtest.New(t)
	c := pgqueue.New(db.Pool, pgqueue.Config{})
	makeEffects(t, db.Pool)

	var mu sync.Mutex
	var wrapped, sawStartCtx int
	var ends []worker.JobEnd
	claims := 0
	reg := worker.NewRegistry()
	worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[effectArgs]) error {
		if ctx.Value(ctxKey{}) == "started" {
			mu.Lock()
			sawStartCtx++
			mu.Unlock()
		}
		_, err := tx.Exec(ctx, "INSERT INTO effects VALUES ($1, $2, $3)", job.ID, job.Args.N, job.Fence)
		return err
	})
	cfg := worker.Config{
		Middleware: []worker.Middleware{func(next worker.HandlerFunc) worker.HandlerFunc {
			return func(ctx context.Context, job *queue.Job) error {
				mu.Lock()
				wrapped++
				mu.Unlock()
				return next(ctx, job)
			}
		}},
		Hooks: worker.Hooks{
			JobStart: func(ctx context.Context, job *queue.Job) context.Context {
				return context.WithValue(ctx, ctxKey{}, "started")
			},
			JobEnd: func(ctx context.Context, job *queue.Job, end worker.JobEnd) {
				if ctx.Value(ctxKey{}) != "started" {
					t.Error("JobEnd did not get JobStart's context")
				}
				mu.Lock()
				ends = append(ends, end)
				mu.Unlock()
			},
			Claim: func(ctx context.Context, ci worker.ClaimInfo) {
				mu.Lock()
				claims += ci.Jobs
				mu.Unlock()
			},
		},
	}
	for i := range 3 {
		if _, err := c.Insert(context.Background(), effectArgs{N: i}, nil); err != nil {
			t.Fatal(err)
		}
	}
	startWorker(t, c, reg, cfg)
	testwatch.WaitFor(t, time.Minute, "three JobEnds", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ends) == 3
	})
	mu.Lock()
	defer mu.Unlock()
	if wrapped != 3 || sawStartCtx != 3 || claims != 3 {
		t.Errorf("middleware ran %d times, handler saw JobStart's context %d times, claims returned %d jobs; want 3 each", wrapped, sawStartCtx, claims)
	}
	for _, e := range ends {
		if e.Outcome != queue.OutcomeComplete || e.Stale || e.Lost || e.Err != nil || e.Duration <= 0 {
			t.Errorf("JobEnd = %+v, want a completion with a duration", e)
		}
	}
	if rows, _ := countEffects(t, db.Pool); rows != 3 {
		t.Errorf("%d effects, want 3", rows)
	}
}

// TestJobEndLost: a job taken from its worker while the handler runs (as a
// rescuer would) ends once, as lost, with the handler's error.
func TestJobEndLost(t *testing.T) {
	db := pgtest.New(t)
	c := pgqueue.New(db.Pool, pgqueue.Config{})
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[effectArgs]) error {
		if _, err := db.Pool.Exec(ctx, `UPDATE jobfence_jobs SET fence = nextval('jobfence_fence_seq'), state = 'cancelled' WHERE id = $1`, job.ID); err != nil {
			return err
		}
		<-ctx.Done() // the next heartbeat finds the claim gone
		return context.Cause(ctx)
	})
	ends := make(chan worker.JobEnd, 2)
	startWorker(t, c, reg, worker.Config{
		Lease: 3 * time.Second, HeartbeatInterval: 200 * time.Millisecond,
		Hooks: worker.Hooks{JobEnd: func(ctx context.Context, job *queue.Job, end worker.JobEnd) { ends <- end }},
	})
	if _, err := c.Insert(context.Background(), effectArgs{N: 1}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-ends:
		if !e.Lost || e.Stale || e.Outcome != 0 || !errors.Is(e.Err, worker.ErrLeaseLost) || e.Duration <= 0 {
			t.Errorf("JobEnd = %+v, want lost with ErrLeaseLost", e)
		}
	case <-time.After(time.Minute):
		t.Fatal("no JobEnd within a minute")
	}
	select {
	case e := <-ends:
		t.Errorf("a second JobEnd: %+v", e)
	case <-time.After(500 * time.Millisecond):
	}
}
