package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

type reclaimArgs struct{}

func (reclaimArgs) Kind() string { return "reclaim" }

// TestReclaimBySameWorkerStaysWatched: a worker loses a job (its handler
// ignores the lost lease), the job is rescued and claimed again by the same
// worker while the first handler still runs. When the first handler
// returns, the second claim must still be tracked: cancelling the job
// reaches the second handler at once.
func TestReclaimBySameWorkerStaysWatched(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	res, err := c.Insert(ctx, reclaimArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	releaseFirst := make(chan struct{})
	secondStarted := make(chan struct{})
	secondCause := make(chan error, 1)
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[reclaimArgs]) error {
		if job.Attempt == 1 {
			<-releaseFirst // deaf to its context, as a careless handler is
			return nil
		}
		close(secondStarted)
		<-ctx.Done()
		secondCause <- context.Cause(ctx)
		return ctx.Err()
	}, worker.HandlerOptions{Timeout: -1})
	hb := &blockingHeartbeats{Client: c, release: make(chan struct{})}
	// The lease is short so that the first claim soon expires, yet long
	// enough that the second claim outlives the heartbeats still blocked
	// when it starts, on a busy machine too.
	w := startWorker(t, hb, reg, worker.Config{Lease: 2 * time.Second, RescueInterval: 100 * time.Millisecond,
		PollInterval: 50 * time.Millisecond, Queues: map[string]int{"default": 4}})
	select {
	case <-secondStarted:
	case <-time.After(30 * time.Second):
		t.Fatal("the job was not claimed a second time")
	}
	close(releaseFirst) // the first handler returns; its outcome is stale
	close(hb.release)
	testwatch.WaitFor(t, 10*time.Second, "the first claim's stale outcome", func() bool { return w.Stats().Stale == 1 })
	if err := c.Cancel(ctx, res.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-secondCause:
		if !errors.Is(cause, worker.ErrJobCancelled) {
			t.Fatalf("second handler's cause = %v, want ErrJobCancelled", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancelling the job did not reach the second claim's handler: it is no longer tracked")
	}
	if j := stateOf(t, c, res.ID); j.State != queue.StateCancelled || j.Attempt != 2 {
		t.Fatalf("job %+v", j)
	}
}

type slowArgs struct {
	Block bool `json:"block"`
}

func (slowArgs) Kind() string { return "slow" }

// TestFreeSlotsBelowThresholdAreUsed: with most slots held by long jobs, a
// ready job still starts in the few free slots.
func TestFreeSlotsBelowThresholdAreUsed(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	release := make(chan struct{})
	defer close(release)
	quick := make(chan struct{}, 1)
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[slowArgs]) error {
		if job.Args.Block {
			<-release
			return nil
		}
		quick <- struct{}{}
		return nil
	}, worker.HandlerOptions{Timeout: -1})
	// FetchLimit 40 with 40 slots makes the claim threshold 10 free slots.
	startWorker(t, c, reg, worker.Config{Queues: map[string]int{"default": 40}, FetchLimit: 40, PollInterval: 100 * time.Millisecond})
	for range 35 {
		if _, err := c.Insert(ctx, slowArgs{Block: true}, nil); err != nil {
			t.Fatal(err)
		}
	}
	testwatch.WaitFor(t, 20*time.Second, "35 long jobs running", func() bool {
		counts, _ := c.Counts(ctx, "")
		return counts[queue.StateRunning] == 35
	})
	if _, err := c.Insert(ctx, slowArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-quick:
	case <-time.After(10 * time.Second):
		t.Fatal("a ready job did not start in one of the 5 free slots")
	}
}

type cancelArgs struct{}

func (cancelArgs) Kind() string { return "cancel" }

// lateCancels is a real pgqueue backend whose cancel notifications come from
// the test, so that one can arrive late.
type lateCancels struct {
	*pgqueue.Client
	ch chan queue.Lease
}

func (l *lateCancels) Cancelled(context.Context) (<-chan queue.Lease, error) { return l.ch, nil }

// TestLateCancelNotificationSparesTheNextClaim: a cancel notification names
// the claim it cancelled. One that arrives after the job was retried and
// claimed again (it carries the old fence) leaves the new claim's handler
// running; the notification of the current claim cancels it.
func TestLateCancelNotificationSparesTheNextClaim(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	if _, err := c.Insert(ctx, cancelArgs{}, nil); err != nil {
		t.Fatal(err)
	}
	type start struct {
		lease queue.Lease
		ctx   context.Context
	}
	started := make(chan start, 1)
	cause := make(chan error, 1)
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[cancelArgs]) error {
		started <- start{job.Lease(), ctx}
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	}, worker.HandlerOptions{Timeout: -1})
	lc := &lateCancels{Client: c, ch: make(chan queue.Lease)}
	startWorker(t, lc, reg, worker.Config{PollInterval: 50 * time.Millisecond, Queues: map[string]int{"default": 1}})
	var st start
	select {
	case st = <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the job did not start")
	}
	old := queue.Lease{ID: st.lease.ID, Fence: st.lease.Fence - 1}
	lc.ch <- old
	lc.ch <- old // taken only once the first was handled, cancel included
	if err := context.Cause(st.ctx); err != nil {
		t.Fatalf("a notification for an earlier claim (fence %d) cancelled the claim under fence %d: %v", old.Fence, st.lease.Fence, err)
	}
	lc.ch <- st.lease
	select {
	case err := <-cause:
		if !errors.Is(err, worker.ErrJobCancelled) {
			t.Fatalf("cause = %v, want ErrJobCancelled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the current claim's cancel notification did not reach its handler")
	}
}
