package jobfence_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobfence/jobfence"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/worker"
)

// held counts the block jobs running at once and holds each until gate
// is closed, then for a few milliseconds of work, so that jobs that are
// let run side by side overlap.
type held struct {
	running, started, ended atomic.Int64
	// maxAfter is the most block jobs running at once seen by a job
	// started after mark was set.
	mark, maxAfter atomic.Int64
	mu             sync.Mutex
	gate           chan struct{}
}

func newHeld() *held { return &held{gate: make(chan struct{})} }

func (h *held) run(ctx context.Context, _ *jobfence.Job[block]) error {
	n := h.running.Add(1)
	defer h.running.Add(-1)
	h.started.Add(1)
	defer h.ended.Add(1)
	if h.mark.Load() == 1 {
		for {
			m := h.maxAfter.Load()
			if n <= m || h.maxAfter.CompareAndSwap(m, n) {
				break
			}
		}
	}
	h.mu.Lock()
	gate := h.gate
	h.mu.Unlock()
	select {
	case <-gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	// Work, not synchronisation: jobs let run together overlap.
	time.Sleep(20 * time.Millisecond)
	return nil
}

// TestQueuesLocal: a running client adds a queue and runs its job;
// bad inputs get errors that say what is wrong; Set to 1 bounds the
// queue's running jobs to 1 without cancelling those running; Remove
// waits for the running jobs, claims nothing more of the queue, and
// takes it off the worker's registry entry.
func TestQueuesLocal(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	reg := jobfence.NewRegistry()
	h := newHeld()
	jobfence.AddHandler(reg, h.run)
	jobfence.AddHandler(reg, func(context.Context, *jobfence.Job[greet]) error { return nil })
	c := newClient(t, db.Pool, jobfence.Config{Queues: map[string]int{"default": 4}, Handlers: reg})
	start(t, c)
	qs := c.Queues()

	// Add: a job of a new queue runs.
	if err := qs.Add("mail", 1); err != nil {
		t.Fatal(err)
	}
	res, err := c.Insert(ctx, greet{Name: "a"}, &jobfence.InsertOpts{Queue: "mail"})
	if err != nil {
		t.Fatal(err)
	}
	testwatch.WaitFor(t, 30*time.Second, "the job of the added queue to complete", func() bool { return state(t, c, res.ID) == queue.StateCompleted })
	if got, want := qs.Worked(), map[string]int{"default": 4, "mail": 1}; !mapsEqual(got, want) {
		t.Errorf("Worked = %v, want %v", got, want)
	}

	// Bad input.
	for _, tc := range []struct {
		err  error
		is   error
		want string
	}{
		{qs.Add("", 1), jobfence.ErrNoQueueName, "jobfence: worker: add queue: jobfence: a queue name is required"},
		{qs.Add("x", 0), jobfence.ErrBadConcurrency, `jobfence: worker: add queue: jobfence: bad queue concurrency: queue "x": concurrency 0 is out of range: it must be between 1 and 10000`},
		{qs.Set("mail", 10_001), jobfence.ErrBadConcurrency, `jobfence: worker: set queue: jobfence: bad queue concurrency: queue "mail": concurrency 10001 is out of range: it must be between 1 and 10000`},
		{qs.Add("mail", 2), jobfence.ErrQueueWorked, `jobfence: worker: add queue "mail": jobfence: queue already worked here (concurrency 1); set its concurrency instead`},
		{qs.Set("nope", 2), jobfence.ErrQueueNotWorked, `jobfence: worker: set queue "nope": jobfence: queue not worked here; add it instead`},
		{qs.Remove(ctx, "nope"), jobfence.ErrQueueNotWorked, `jobfence: worker: remove queue "nope": jobfence: queue not worked here`},
		{qs.Remove(ctx, ""), jobfence.ErrNoQueueName, `jobfence: worker: remove queue: jobfence: a queue name is required`},
	} {
		if !errors.Is(tc.err, tc.is) || tc.err.Error() != tc.want {
			t.Errorf("error %v, want %q (errors.Is %v)", tc.err, tc.want, tc.is)
		}
	}
	insertOnly := newClient(t, db.Pool, jobfence.Config{})
	if err := insertOnly.Queues().Add("mail", 1); !errors.Is(err, jobfence.ErrNoWorker) ||
		err.Error() != "jobfence: client has no worker (no Config.Queues): it works no queue" {
		t.Errorf("Add on an insert-only client: %v", err)
	}

	// Set to 1: the four running jobs go on; after them, one at a time.
	for range 8 {
		if _, err := c.Insert(ctx, block{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	testwatch.WaitFor(t, 30*time.Second, "4 block jobs to run", func() bool { return h.running.Load() == 4 })
	if err := qs.Set("default", 1); err != nil {
		t.Fatal(err)
	}
	h.mark.Store(1)
	if n := h.running.Load(); n != 4 {
		t.Fatalf("%d jobs running after Set 1, want the 4 running before it: shrinking cancels none", n)
	}
	close(h.gate)
	testwatch.WaitFor(t, 30*time.Second, "the 8 block jobs to end", func() bool { return h.ended.Load() == 8 })
	if m := h.maxAfter.Load(); m != 1 {
		t.Errorf("jobs started after Set 1 saw up to %d running at once, want 1", m)
	}
	if got := qs.Worked()["default"]; got != 1 {
		t.Errorf("Worked()[default] = %d, want 1", got)
	}

	// Remove: waits for the running jobs, then claims nothing more.
	if err := qs.Set("default", 2); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	h.gate = make(chan struct{})
	h.mu.Unlock()
	for range 2 {
		if _, err := c.Insert(ctx, block{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	testwatch.WaitFor(t, 30*time.Second, "2 block jobs to run", func() bool { return h.running.Load() == 2 })
	removed := make(chan error, 1)
	go func() { removed <- qs.Remove(ctx, "default") }()
	testwatch.WaitFor(t, 30*time.Second, "Remove to take default off the worked queues", func() bool {
		_, ok := qs.Worked()["default"]
		return !ok
	})
	late, err := c.Insert(ctx, block{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-removed:
		t.Fatalf("Remove returned (%v) while 2 of its jobs ran", err)
	default:
	}
	h.mu.Lock()
	close(h.gate)
	h.mu.Unlock()
	if err := <-removed; err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if n := h.ended.Load(); n != 10 {
		t.Fatalf("Remove returned with %d of 10 block jobs ended, want every running job ended", n)
	}
	// The worker still claims (its mail queue runs a job inserted after
	// the late one), and the late job of the removed queue stays put.
	res, err = c.Insert(ctx, greet{Name: "b"}, &jobfence.InsertOpts{Queue: "mail"})
	if err != nil {
		t.Fatal(err)
	}
	testwatch.WaitFor(t, 30*time.Second, "a mail job after the Remove", func() bool { return state(t, c, res.ID) == queue.StateCompleted })
	if s := state(t, c, late.ID); s != queue.StateAvailable {
		t.Errorf("job of the removed queue is %s, want available", s)
	}
	id := c.Worker().ID()
	testwatch.WaitFor(t, 30*time.Second, "the registry to list mail alone", func() bool {
		var queues []string
		if err := db.Pool.QueryRow(ctx, `SELECT queues FROM jobfence_workers WHERE id = $1`, id).Scan(&queues); err != nil {
			t.Fatal(err)
		}
		return slices.Equal(queues, []string{"mail"})
	})

	// A restart keeps the local changes.
	stop(t, c)
	start(t, c)
	if got, want := qs.Worked(), map[string]int{"mail": 1}; !mapsEqual(got, want) {
		t.Errorf("Worked after a restart = %v, want %v", got, want)
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestQueuesFleet: two instances pick a stored concurrency up within
// seconds; a queue added for the fleet starts in the instance that opted
// in alone and runs its job there; removed for the fleet, it stops; a
// local change overrides the stored setting until that next changes;
// reset returns each instance to its own configuration; the registry
// reports the queues worked.
func TestQueuesFleet(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	newInstance := func(fleet bool) *jobfence.Client {
		reg := jobfence.NewRegistry()
		jobfence.AddHandler(reg, func(context.Context, *jobfence.Job[greet]) error { return nil })
		c := newClient(t, db.Pool, jobfence.Config{Queues: map[string]int{"default": 4}, Handlers: reg,
			Worker: worker.Config{FleetQueues: fleet}})
		start(t, c)
		return c
	}
	a, b := newInstance(false), newInstance(true)
	fleet := a.Queues()
	wait := func(what string, want map[string]int, cs ...*jobfence.Client) {
		t.Helper()
		testwatch.WaitFor(t, 15*time.Second, what, func() bool {
			for _, c := range cs {
				if !mapsEqual(c.Queues().Worked(), want) {
					return false
				}
			}
			return true
		})
	}

	if err := fleet.FleetSet(ctx, "default", 2, "ops"); err != nil {
		t.Fatal(err)
	}
	wait("both instances to work default at 2", map[string]int{"default": 2}, a, b)

	if err := fleet.FleetAdd(ctx, "extra", 3, "ops"); err != nil {
		t.Fatal(err)
	}
	wait("the opted-in instance to start extra", map[string]int{"default": 2, "extra": 3}, b)
	res, err := a.Insert(ctx, greet{Name: "x"}, &jobfence.InsertOpts{Queue: "extra"})
	if err != nil {
		t.Fatal(err)
	}
	testwatch.WaitFor(t, 30*time.Second, "the extra job to complete", func() bool { return state(t, a, res.ID) == queue.StateCompleted })
	if j, err := a.Get(ctx, res.ID); err != nil || !slices.Equal(j.AttemptedBy, []string{b.Worker().ID()}) {
		t.Errorf("extra job attempted by %v (%v), want the opted-in instance %s", j.AttemptedBy, err, b.Worker().ID())
	}
	if got := a.Queues().Worked(); !mapsEqual(got, map[string]int{"default": 2}) {
		t.Errorf("the instance that did not opt in works %v, want default at 2 alone", got)
	}
	testwatch.WaitFor(t, 15*time.Second, "the registry to list extra for b", func() bool {
		var queues []string
		if err := db.Pool.QueryRow(ctx, `SELECT queues FROM jobfence_workers WHERE id = $1`, b.Worker().ID()).Scan(&queues); err != nil {
			t.Fatal(err)
		}
		return slices.Equal(queues, []string{"default", "extra"})
	})

	if err := fleet.FleetRemove(ctx, "extra", "ops"); err != nil {
		t.Fatal(err)
	}
	wait("extra to stop", map[string]int{"default": 2}, a, b)
	err = fleet.FleetRemove(ctx, "nosuch", "ops")
	if want := `pgqueue: stop queue "nosuch": jobfence: unknown queue: no worker works it and nothing is stored for it`; !errors.Is(err, jobfence.ErrUnknownQueue) || err.Error() != want {
		t.Errorf("FleetRemove of an unknown queue: %v, want %q", err, want)
	}
	err = fleet.FleetSet(ctx, "default", 0, "ops")
	if want := `pgqueue: set queue concurrency: jobfence: bad queue concurrency: queue "default": concurrency 0 is out of range: it must be between 1 and 10000`; !errors.Is(err, jobfence.ErrBadConcurrency) || err.Error() != want {
		t.Errorf("FleetSet 0: %v, want %q", err, want)
	}
	if err := fleet.FleetReset(ctx, "", "ops"); !errors.Is(err, jobfence.ErrNoQueueName) {
		t.Errorf("FleetReset with no name: %v, want ErrNoQueueName", err)
	}

	// A local change wins until the stored setting changes again.
	if err := a.Queues().Set("default", 1); err != nil {
		t.Fatal(err)
	}
	if got := a.Queues().Worked()["default"]; got != 1 {
		t.Fatalf("after a local Set 1, default at %d", got)
	}
	if err := fleet.FleetSet(ctx, "default", 3, "ops"); err != nil {
		t.Fatal(err)
	}
	wait("both instances to follow the new stored size", map[string]int{"default": 3}, a, b)

	// Reset: each instance's own configuration, a's local Set included.
	if err := fleet.FleetReset(ctx, "default", "ops"); err != nil {
		t.Fatal(err)
	}
	wait("a back to its local size", map[string]int{"default": 1}, a)
	wait("b back to its configured size", map[string]int{"default": 4}, b)
	infos, err := fleet.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range infos {
		switch q.Name {
		case "extra":
			if q.Run != queue.RunStopped || q.Concurrency != 3 || q.UpdatedBy != "ops" {
				t.Errorf("extra listed as run %q, concurrency %d, by %q; want stopped, 3, ops", q.Run, q.Concurrency, q.UpdatedBy)
			}
		case "default":
			if q.Run != queue.RunConfigured || q.Concurrency != 0 {
				t.Errorf("default listed as run %q, concurrency %d after reset", q.Run, q.Concurrency)
			}
		}
	}
}
