package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/logbuf"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

type stuckArgs struct{}

func (stuckArgs) Kind() string { return "stuck" }

// deafHandler's first attempts block, deaf to their context as a read
// with no deadline is, until free is called, and then complete; later
// attempts complete at once.
type deafHandler struct {
	// deaf is how many first attempts block.
	deaf    int
	started chan *queue.Job
	release chan struct{}
	once    sync.Once
}

func newDeafHandler() *deafHandler {
	return &deafHandler{deaf: 1, started: make(chan *queue.Job, 16), release: make(chan struct{})}
}

func (h *deafHandler) free() { h.once.Do(func() { close(h.release) }) }

func (h *deafHandler) run(ctx context.Context, job *worker.Job[stuckArgs]) error {
	if job.Attempt <= h.deaf {
		h.started <- job.Job
		<-h.release
	}
	return nil
}

func (h *deafHandler) firstAttempt(t *testing.T) *queue.Job {
	t.Helper()
	select {
	case j := <-h.started:
		return j
	case <-time.After(20 * time.Second):
		t.Fatal("the job's first attempt did not start")
		return nil
	}
}

// countingHeartbeats counts the heartbeats sent for each claim.
type countingHeartbeats struct {
	*pgqueue.Client
	mu   sync.Mutex
	sent map[queue.Lease]int
}

func (b *countingHeartbeats) Heartbeat(ctx context.Context, leases []queue.Lease, d time.Duration) ([]queue.Lease, error) {
	b.mu.Lock()
	for _, l := range leases {
		b.sent[l]++
	}
	b.mu.Unlock()
	return b.Client.Heartbeat(ctx, leases, d)
}

func (b *countingHeartbeats) count(l queue.Lease) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sent[l]
}

// TestStuckHandlerGivenUp: a handler that ignores its context past its
// timeout and StuckGrace is given up on: its lease is no longer extended,
// the rescuer takes the job back and spends the attempt, the worker's one
// slot goes to a new runner that completes the second attempt, the stuck
// handler is counted, logged and reported once to JobEnd, and its late
// completion is refused as stale.
func TestStuckHandlerGivenUp(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	h := newDeafHandler()
	reg := worker.NewRegistry()
	worker.Add(reg, h.run, worker.HandlerOptions{Timeout: 200 * time.Millisecond})
	var mu sync.Mutex
	var ends []worker.JobEnd
	var logs logbuf.Buffer
	hb := &countingHeartbeats{Client: c, sent: map[queue.Lease]int{}}
	w := startWorker(t, hb, reg, worker.Config{
		// One slot: the second attempt runs only if the stuck handler's
		// slot is let go.
		Queues: map[string]int{"default": 1},
		// A lease of many heartbeats: it runs out only once they stop.
		Lease: 2 * time.Second, HeartbeatInterval: 100 * time.Millisecond, StuckGrace: 200 * time.Millisecond,
		RescueInterval: 100 * time.Millisecond, PromoteInterval: 50 * time.Millisecond, PollInterval: 50 * time.Millisecond,
		RetryPolicy: worker.ExponentialRetry{Max: time.Millisecond},
		Logger:      slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Hooks: worker.Hooks{JobEnd: func(_ context.Context, job *queue.Job, end worker.JobEnd) {
			if job.Attempt == 1 {
				mu.Lock()
				ends = append(ends, end)
				mu.Unlock()
			}
		}},
	})
	// Cleanups run last first: the handler is freed before the worker stops.
	t.Cleanup(h.free)
	res, err := c.Insert(ctx, stuckArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := h.firstAttempt(t)
	testwatch.WaitFor(t, 10*time.Second, "the stuck handler given up on", func() bool { return w.Stats().Stuck == 1 })
	// Given up on at the start of a heartbeat, after the previous one
	// returned: from now on no heartbeat carries the first claim.
	beats := hb.count(first.Lease())
	testwatch.WaitFor(t, 20*time.Second, "the job completed by a second attempt", func() bool {
		return stateOf(t, c, res.ID).State == queue.StateCompleted
	})
	if n := hb.count(first.Lease()); n != beats {
		t.Errorf("%d heartbeats extended the stuck claim's lease after the worker gave up on it", n-beats)
	}
	j := stateOf(t, c, res.ID)
	if j.Attempt != 2 || len(j.Errors) != 1 || j.Errors[0].Attempt != 1 || j.Errors[0].PutBack ||
		!strings.Contains(j.Errors[0].Error, "lease expired") {
		t.Fatalf("job: attempt %d, errors %+v; want the first attempt spent by the rescuer and the second completed", j.Attempt, j.Errors)
	}
	if s := w.Stats(); s.Stuck != 1 || s.StuckRunning != 1 || s.Rescued != 1 || s.Lost != 0 {
		t.Fatalf("stats %+v; want 1 stuck, still running, 1 rescued, none lost", s)
	}
	line := fmt.Sprintf("job=%d kind=stuck queue=default attempt=1 fence=%d", first.ID, first.Fence)
	if out := logs.String(); !strings.Contains(out, "gave up on it") || !strings.Contains(out, line) {
		t.Errorf("no log line giving up on the handler with %q in:\n%s", line, out)
	}

	h.free() // the stuck handler returns at last and completes: too late
	testwatch.WaitFor(t, 10*time.Second, "the late completion refused as stale", func() bool {
		s := w.Stats()
		return s.Stale == 1 && s.StuckRunning == 0
	})
	if s := w.Stats(); s.Completed != 1 || s.Stuck != 1 {
		t.Fatalf("stats %+v; want the second attempt's completion alone applied", s)
	}
	if j := stateOf(t, c, res.ID); j.State != queue.StateCompleted || j.Attempt != 2 || j.Fence == first.Fence {
		t.Fatalf("job %+v changed by the stale completion", j)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ends) != 1 || !ends[0].Stuck || !ends[0].Lost || !errors.Is(ends[0].Err, worker.ErrHandlerStuck) {
		t.Fatalf("JobEnd of the first attempt: %+v; want one, stuck and lost", ends)
	}
}

// TestStopReturnsWhileHandlerIgnoresContext: Stop returns about at its
// deadline while a handler with no timeout ignores its cancellation; the
// job is left to the rescuer, another worker completes it, and the
// handler's completion, when it comes after all, is refused as stale.
func TestStopReturnsWhileHandlerIgnoresContext(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	h := newDeafHandler()
	reg := worker.NewRegistry()
	worker.Add(reg, h.run, worker.HandlerOptions{Timeout: -1})
	const lease = time.Second
	w1 := startWorker(t, c, reg, worker.Config{Queues: map[string]int{"default": 1}, Lease: lease,
		StuckGrace: 200 * time.Millisecond, PollInterval: 50 * time.Millisecond, DisableMaintenance: true})
	t.Cleanup(h.free)
	res, err := c.Insert(ctx, stuckArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := h.firstAttempt(t)

	const deadline = 300 * time.Millisecond
	stopped := make(chan error, 1)
	start := time.Now()
	go func() {
		sctx, cancel := context.WithTimeout(ctx, deadline)
		defer cancel()
		stopped <- w1.Stop(sctx)
	}()
	select {
	case err := <-stopped:
		// The deadline, then StuckGrace for the cancelled handler; the
		// rest is slack for a busy machine.
		if took := time.Since(start); took > deadline+200*time.Millisecond+time.Second {
			t.Errorf("Stop took %s with a deadline of %s", took, deadline)
		}
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "except 1 whose handlers ignored their context") {
			t.Errorf("Stop: %v, want its deadline's error naming the handler given up on", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return while a handler ignored its context")
	}
	if s := w1.Stats(); s.Stuck != 1 || s.StuckRunning != 1 {
		t.Fatalf("stats %+v; want the handler counted stuck, still running", s)
	}

	// The job is the rescuer's once its lease runs out.
	startWorker(t, c, reg, worker.Config{Lease: lease, RescueInterval: 100 * time.Millisecond,
		PromoteInterval: 50 * time.Millisecond, PollInterval: 50 * time.Millisecond, RetryPolicy: worker.ExponentialRetry{Max: time.Millisecond}})
	testwatch.WaitFor(t, 20*time.Second, "the job completed by another worker", func() bool {
		return stateOf(t, c, res.ID).State == queue.StateCompleted
	})
	h.free()
	testwatch.WaitFor(t, 10*time.Second, "the late completion refused as stale", func() bool {
		s := w1.Stats()
		return s.Stale == 1 && s.StuckRunning == 0
	})
	if j := stateOf(t, c, res.ID); j.Attempt != 2 || j.Fence == first.Fence {
		t.Fatalf("job %+v; want the second attempt's completion", j)
	}
}

// TestStuckHandlersKeepSlotsPastConcurrency: a queue lets go of the slots
// of at most as many stuck handlers as its concurrency; the next stuck
// handler keeps its slot, so the queue stops claiming, and Stop still
// returns about at its deadline. A late outcome of a job nobody claimed
// again is recorded: its fence is still current.
func TestStuckHandlersKeepSlotsPastConcurrency(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	h := newDeafHandler()
	h.deaf = 1 << 30
	reg := worker.NewRegistry()
	worker.Add(reg, h.run, worker.HandlerOptions{Timeout: 100 * time.Millisecond})
	w := startWorker(t, c, reg, worker.Config{Queues: map[string]int{"default": 1},
		Lease: time.Second, HeartbeatInterval: 100 * time.Millisecond, StuckGrace: 100 * time.Millisecond,
		PollInterval: 50 * time.Millisecond, DisableMaintenance: true})
	t.Cleanup(h.free)
	var ids []int64
	for range 3 {
		res, err := c.Insert(ctx, stuckArgs{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ID)
	}
	h.firstAttempt(t)
	h.firstAttempt(t) // in the slot the first stuck handler let go
	testwatch.WaitFor(t, 10*time.Second, "both handlers given up on", func() bool { return w.Stats().Stuck == 2 })
	// The second kept its slot: the third job waits. A few polls show it.
	time.Sleep(300 * time.Millisecond)
	if s := w.Stats(); s.Claimed != 2 || s.StuckRunning != 2 {
		t.Fatalf("stats %+v; want 2 claimed, both stuck", s)
	}

	const deadline = 300 * time.Millisecond
	sctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	stopped := make(chan error, 1)
	start := time.Now()
	go func() { stopped <- w.Stop(sctx) }()
	select {
	case <-stopped:
		if took := time.Since(start); took > deadline+100*time.Millisecond+time.Second {
			t.Errorf("Stop took %s with a deadline of %s", took, deadline)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return while a stuck handler held its slot")
	}
	if s := w.Stats(); s.Stuck != 2 {
		t.Fatalf("stats %+v; want the 2 stuck handlers counted once each", s)
	}
	h.free()
	testwatch.WaitFor(t, 10*time.Second, "the late completions recorded", func() bool {
		s := w.Stats()
		return s.Completed == 2 && s.StuckRunning == 0
	})
	for i, id := range ids {
		want := queue.StateCompleted
		if i == 2 {
			want = queue.StateAvailable
		}
		if j := stateOf(t, c, id); j.State != want {
			t.Errorf("job %d: %s, want %s", i+1, j.State, want)
		}
	}
}
