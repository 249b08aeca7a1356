package worker_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// failingHeartbeats wraps a real backend whose heartbeats fail, as when the
// worker is cut off from the database.
type failingHeartbeats struct{ *pgqueue.Client }

func (failingHeartbeats) Heartbeat(ctx context.Context, leases []queue.Lease, d time.Duration) ([]queue.Lease, error) {
	return nil, errors.New("network is unreachable")
}

// TestLeaseRunsOutWithoutHeartbeats: a worker that cannot heartbeat cannot
// prove it still holds its jobs, so it cancels their handlers when the lease
// runs out, before anyone else may have claimed them.
func TestLeaseRunsOutWithoutHeartbeats(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	cause := make(chan error, 1)
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[effectArgs]) error {
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	})
	w := startWorker(t, failingHeartbeats{c}, reg, worker.Config{Lease: 500 * time.Millisecond, DisableMaintenance: true})
	start := time.Now()
	if _, err := c.Insert(ctx, effectArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-cause:
		if !errors.Is(err, worker.ErrLeaseLost) || !errors.Is(err, queue.ErrStaleFence) {
			t.Fatalf("cause = %v, want ErrLeaseLost", err)
		}
		if d := time.Since(start); d < 400*time.Millisecond {
			t.Fatalf("cancelled after %s, before the lease ran out", d)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("handler not cancelled when its lease ran out")
	}
	testwatch.WaitFor(t, 10*time.Second, "lost counted", func() bool { return w.Stats().Lost == 1 })
}

// TestHandlerCancelledBeforeLeaseEnds: without heartbeats, a handler is
// cancelled before its lease ends by the database's clock (when another
// worker may claim the job), not at the next heartbeat tick after it.
func TestHandlerCancelledBeforeLeaseEnds(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	type cancelled struct {
		at    time.Time
		lease time.Time
	}
	got := make(chan cancelled, 1)
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[effectArgs]) error {
		<-ctx.Done()
		got <- cancelled{time.Now(), job.LeaseExpiresAt}
		return ctx.Err()
	})
	// A heartbeat tick just short of the lease: a check made only on ticks
	// comes almost a whole interval late.
	lease := 2 * time.Second
	startWorker(t, failingHeartbeats{c}, reg, worker.Config{Lease: lease, HeartbeatInterval: lease - 100*time.Millisecond, DisableMaintenance: true})
	if _, err := c.Insert(ctx, effectArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case g := <-got:
		if !g.at.Before(g.lease) {
			t.Fatalf("handler cancelled at %v, %s after its lease ended at %v", g.at, g.at.Sub(g.lease), g.lease)
		}
		if early := g.lease.Sub(g.at); early > lease/2 {
			t.Fatalf("handler cancelled %s before its lease ended", early)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("handler not cancelled")
	}
}

func TestMiddleware(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	var mu sync.Mutex
	var order []string
	record := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	var calls atomic.Int64
	mw := func(name string) worker.Middleware {
		return func(next worker.HandlerFunc) worker.HandlerFunc {
			return func(ctx context.Context, job *queue.Job) error {
				record(name + ">")
				err := next(ctx, job)
				record("<" + name)
				return err
			}
		}
	}
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[effectArgs]) error {
		record("handler")
		calls.Add(1)
		return nil
	})
	startWorker(t, c, reg, worker.Config{Middleware: []worker.Middleware{mw("outer"), mw("inner")}, Queues: map[string]int{"default": 1}})
	res, _ := c.Insert(ctx, effectArgs{}, nil)
	testwatch.WaitFor(t, 20*time.Second, "job completed", func() bool { return stateOf(t, c, res.ID).State == queue.StateCompleted })
	want := []string{"outer>", "inner>", "handler", "<inner", "<outer"}
	mu.Lock()
	defer mu.Unlock()
	if calls.Load() != 1 || len(order) != len(want) {
		t.Fatalf("order = %v", order)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("order = %v, want %v", order, want)
		}
	}
}
