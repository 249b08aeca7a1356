package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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

type batchArgs struct {
	N int `json:"n"`
}

func (batchArgs) Kind() string { return "batch" }

// batchCalls records each call of a batch handler: its jobs' Ns.
type batchCalls struct {
	mu    sync.Mutex
	calls [][]int
}

func (b *batchCalls) add(jobs []*worker.Job[batchArgs]) {
	ns := make([]int, len(jobs))
	for i, j := range jobs {
		ns[i] = j.Args.N
	}
	b.mu.Lock()
	b.calls = append(b.calls, ns)
	b.mu.Unlock()
}

func (b *batchCalls) get() [][]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.calls)
}

// insertBatchJobs inserts n jobs of batchArgs (N 0..n-1) in queue q.
func insertBatchJobs(t *testing.T, c *pgqueue.Client, q string, n int, opts *queue.InsertOpts) []int64 {
	t.Helper()
	ids := make([]int64, n)
	for i := range n {
		o := queue.InsertOpts{Queue: q}
		if opts != nil {
			o = *opts
			o.Queue = q
		}
		res, err := c.Insert(context.Background(), batchArgs{N: i}, &o)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = res.ID
	}
	return ids
}

// TestBatchMixedOutcomes: one call of a batch handler gets every job, and
// each job takes the path its own result says: completed (with its
// output), retried, snoozed, cancelled, discarded.
func TestBatchMixedOutcomes(t *testing.T) {
	db := pgtest.New(t)
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	ids := insertBatchJobs(t, c, "default", 5, nil)
	last, err := c.Insert(context.Background(), batchArgs{N: 5}, &queue.InsertOpts{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, last.ID)
	var calls batchCalls
	reg := worker.NewRegistry()
	worker.AddBatch(reg, func(ctx context.Context, jobs []*worker.Job[batchArgs]) []error {
		calls.add(jobs)
		errs := make([]error, len(jobs))
		for i, j := range jobs {
			switch j.Args.N {
			case 0, 4:
				if err := worker.RecordBatchOutput(ctx, j.Job, fmt.Sprintf("sent %d", j.Args.N)); err != nil {
					errs[i] = err
				}
			case 1:
				errs[i] = errors.New("mailbox full")
			case 2:
				errs[i] = worker.JobSnooze(time.Hour)
			case 3:
				errs[i] = worker.JobCancel(errors.New("unsubscribed"))
			case 5:
				errs[i] = errors.New("bounced")
			}
		}
		return errs
	}, worker.BatchOpts{MaxSize: 6, Linger: time.Minute})
	start := time.Now()
	startWorker(t, c, reg, worker.Config{Queues: map[string]int{"default": 6}})
	testwatch.WaitFor(t, 30*time.Second, "every job ended its attempt", func() bool {
		for _, id := range ids {
			if stateOf(t, c, id).State == queue.StateRunning || stateOf(t, c, id).State == queue.StateAvailable {
				return false
			}
		}
		return true
	})
	if took := time.Since(start); took >= time.Minute {
		t.Fatalf("a full batch waited %s, its whole linger", took)
	}
	if got := calls.get(); len(got) != 1 || len(got[0]) != 6 {
		t.Fatalf("calls = %v; want one call with the 6 jobs", got)
	}
	want := []struct {
		state   queue.State
		attempt int
		output  string
		err     string
	}{
		{queue.StateCompleted, 1, `"sent 0"`, ""},
		{queue.StateRetryable, 1, "", "mailbox full"},
		{queue.StateScheduled, 0, "", ""},
		{queue.StateCancelled, 1, "", "unsubscribed"},
		{queue.StateCompleted, 1, `"sent 4"`, ""},
		{queue.StateDiscarded, 1, "", "bounced"},
	}
	for i, id := range ids {
		j := stateOf(t, c, id)
		w := want[i]
		if j.State != w.state || j.Attempt != w.attempt || string(j.Output) != w.output {
			t.Errorf("job N=%d: state %s attempt %d output %s; want %s %d %s", i, j.State, j.Attempt, j.Output, w.state, w.attempt, w.output)
		}
		if w.err != "" && (len(j.Errors) == 0 || !strings.Contains(j.Errors[len(j.Errors)-1].Error, w.err)) {
			t.Errorf("job N=%d: errors %+v; want one with %q", i, j.Errors, w.err)
		}
	}
}

// TestBatchLingerTimesOut: a batch that does not fill is handed to the
// handler once its linger has passed, with the jobs it has.
func TestBatchLingerTimesOut(t *testing.T) {
	db := pgtest.New(t)
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	ids := insertBatchJobs(t, c, "default", 3, nil)
	linger := 400 * time.Millisecond
	var calls batchCalls
	waited := make(chan time.Duration, 10)
	reg := worker.NewRegistry()
	worker.AddBatch(reg, func(ctx context.Context, jobs []*worker.Job[batchArgs]) []error {
		calls.add(jobs)
		first := jobs[0].AttemptedAt
		for _, j := range jobs {
			if j.AttemptedAt.Before(first) {
				first = j.AttemptedAt
			}
		}
		waited <- time.Since(first)
		return make([]error, len(jobs))
	}, worker.BatchOpts{MaxSize: 50, Linger: linger})
	startWorker(t, c, reg, worker.Config{Queues: map[string]int{"default": 50}})
	testwatch.WaitFor(t, 30*time.Second, "the jobs completed", func() bool {
		for _, id := range ids {
			if stateOf(t, c, id).State != queue.StateCompleted {
				return false
			}
		}
		return true
	})
	got := calls.get()
	if len(got) != 1 || len(got[0]) != 3 {
		t.Fatalf("calls = %v; want one call with the 3 jobs", got)
	}
	// Claimed (by the database's clock, on this machine) at least the
	// linger before the call; a few milliseconds of clock reading spare.
	if d := <-waited; d < linger-20*time.Millisecond {
		t.Fatalf("the handler was called %s after the claim; want the linger, %s", d, linger)
	}
}

// TestBatchUnderALimit: each job of a batch holds its own slot of the
// limit that governs it, so no batch holds more jobs than the limit
// allows running at once.
func TestBatchUnderALimit(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	const limit = 2
	if err := c.SetLimit(ctx, pgqueue.Limit{Name: "bulk", Queue: "bulk", Concurrency: limit}); err != nil {
		t.Fatal(err)
	}
	ids := insertBatchJobs(t, c, "bulk", 7, nil)
	var calls batchCalls
	var over atomic.Int64
	reg := worker.NewRegistry()
	worker.AddBatch(reg, func(ctx context.Context, jobs []*worker.Job[batchArgs]) []error {
		calls.add(jobs)
		var running int
		if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM jobfence_jobs WHERE queue = 'bulk' AND state = 'running'").Scan(&running); err != nil {
			t.Error(err)
		}
		if running > limit {
			over.Store(int64(running))
		}
		return make([]error, len(jobs))
	}, worker.BatchOpts{MaxSize: 10, Linger: 200 * time.Millisecond})
	startWorker(t, c, reg, worker.Config{Queues: map[string]int{"bulk": 10}, PollInterval: 100 * time.Millisecond})
	testwatch.WaitFor(t, 60*time.Second, "the jobs completed", func() bool {
		for _, id := range ids {
			if stateOf(t, c, id).State != queue.StateCompleted {
				return false
			}
		}
		return true
	})
	n := 0
	for _, call := range calls.get() {
		if len(call) > limit {
			t.Fatalf("a batch of %d jobs under a limit of %d: %v", len(call), limit, calls.get())
		}
		n += len(call)
	}
	if n != 7 || over.Load() > 0 {
		t.Fatalf("%d jobs handled (want 7), %d running at once under a limit of %d", n, over.Load(), limit)
	}
}

// TestBatchStaleMemberRefusedAlone: a job of a batch whose claim was
// lost while the handler ran (its lease ran out, and another owner
// claimed it) has its completion refused under its stale fence; the
// other jobs of the batch complete.
func TestBatchStaleMemberRefusedAlone(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	ids := insertBatchJobs(t, c, "stale", 3, nil)
	started, release := make(chan struct{}), make(chan struct{})
	reg := worker.NewRegistry()
	worker.AddBatch(reg, func(ctx context.Context, jobs []*worker.Job[batchArgs]) []error {
		close(started)
		<-release // paused past one job's lease, blind to its context
		return make([]error, len(jobs))
	}, worker.BatchOpts{MaxSize: 3, Linger: time.Minute})
	// Heartbeats held: the worker does not learn of the loss, as a
	// paused process would not. Three slots, all held by the batch.
	backend := &blockingHeartbeats{Client: pgqueue.New(db.NewPool(t, 4), pgqueue.Config{Logger: quietLogger()}), release: make(chan struct{})}
	w := startWorker(t, backend, reg, worker.Config{Lease: time.Minute, DisableMaintenance: true, Queues: map[string]int{"stale": 3}})
	t.Cleanup(func() { close(backend.release) }) // before the worker's Stop
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("the batch did not start")
	}
	// Job 1's lease runs out; it is rescued and claimed by another owner.
	stolen := ids[1]
	if _, err := db.Pool.Exec(ctx, "UPDATE jobfence_jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1", stolen); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Rescue(ctx, queue.RescueParams{Limit: 10}); err != nil || n != 1 {
		t.Fatalf("rescue: %d, %v", n, err)
	}
	if _, err := c.Promote(ctx, 10); err != nil {
		t.Fatal(err)
	}
	thief, err := c.Claim(ctx, queue.ClaimParams{Queue: "stale", Limit: 1, Lease: time.Minute, WorkerID: "thief"})
	if err != nil || len(thief) != 1 || thief[0].ID != stolen {
		t.Fatalf("thief's claim: %v, %v", thief, err)
	}
	close(release)
	testwatch.WaitFor(t, 30*time.Second, "the other jobs completed", func() bool {
		return stateOf(t, c, ids[0]).State == queue.StateCompleted && stateOf(t, c, ids[2]).State == queue.StateCompleted
	})
	testwatch.WaitFor(t, 30*time.Second, "the stale completion counted", func() bool { return w.Stats().Stale == 1 })
	j := stateOf(t, c, stolen)
	if j.State != queue.StateRunning || j.Fence != thief[0].Fence || j.Attempt != 2 {
		t.Fatalf("stolen job %+v; want still running under the thief's fence %d", j, thief[0].Fence)
	}
	if s := w.Stats(); s.Completed != 2 {
		t.Fatalf("worker stats %+v; want 2 completed", s)
	}
}

// TestBatchWrongResultCount: a result slice that is not one per job
// fails every job of the batch with a message that says so.
func TestBatchWrongResultCount(t *testing.T) {
	db := pgtest.New(t)
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	ids := insertBatchJobs(t, c, "default", 3, nil)
	reg := worker.NewRegistry()
	worker.AddBatch(reg, func(ctx context.Context, jobs []*worker.Job[batchArgs]) []error {
		return []error{nil}
	}, worker.BatchOpts{MaxSize: 3, Linger: time.Minute})
	startWorker(t, c, reg, worker.Config{Queues: map[string]int{"default": 3}})
	want := `jobfence: batch handler returned the wrong number of results: kind "batch": 1 results for 3 jobs; return one per job, in their order (nil for a job that completed)`
	for _, id := range ids {
		testwatch.WaitFor(t, 30*time.Second, "the job failed", func() bool { return stateOf(t, c, id).State == queue.StateRetryable })
		j := stateOf(t, c, id)
		if len(j.Errors) != 1 || j.Errors[0].Error != want {
			t.Fatalf("job %d errors %+v; want %q", id, j.Errors, want)
		}
	}
}

// TestBatchPanic: a panic of the batch handler fails every job of the
// batch with the panic, its stack recorded.
func TestBatchPanic(t *testing.T) {
	db := pgtest.New(t)
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	ids := insertBatchJobs(t, c, "default", 2, nil)
	reg := worker.NewRegistry()
	worker.AddBatch(reg, func(ctx context.Context, jobs []*worker.Job[batchArgs]) []error {
		panic("provider client is nil")
	}, worker.BatchOpts{MaxSize: 2, Linger: time.Minute})
	w := startWorker(t, c, reg, worker.Config{Queues: map[string]int{"default": 2}})
	for _, id := range ids {
		testwatch.WaitFor(t, 30*time.Second, "the job failed", func() bool { return stateOf(t, c, id).State == queue.StateRetryable })
		j := stateOf(t, c, id)
		if len(j.Errors) != 1 || j.Errors[0].Error != "jobfence: handler panicked: provider client is nil" || !strings.Contains(j.Errors[0].Trace, "batch_test.go") {
			t.Fatalf("job %d errors %+v", id, j.Errors)
		}
	}
	if s := w.Stats(); s.Panics != 2 {
		t.Fatalf("stats %+v; want 2 panics", s)
	}
}

// TestBatchOptsRefused: bad options are refused at registration with a
// message that names the kind, the field and what is wanted.
func TestBatchOptsRefused(t *testing.T) {
	fn := func(ctx context.Context, jobs []*worker.Job[batchArgs]) []error { return nil }
	for _, tc := range []struct {
		opts worker.BatchOpts
		want string
	}{
		{worker.BatchOpts{MaxSize: -1}, `jobfence: batch handler of kind "batch": BatchOpts.MaxSize is -1; want 0 (the default, 100) or more`},
		{worker.BatchOpts{Linger: -time.Second}, `jobfence: batch handler of kind "batch": BatchOpts.Linger is -1s; want 0 (the default, 100ms) or more`},
	} {
		func() {
			defer func() {
				if got := fmt.Sprint(recover()); got != tc.want {
					t.Errorf("panic %q; want %q", got, tc.want)
				}
			}()
			worker.AddBatch(worker.NewRegistry(), fn, tc.opts)
		}()
	}
	reg := worker.NewRegistry()
	worker.AddBatch(reg, fn)
	func() {
		defer func() {
			if got, want := fmt.Sprint(recover()), `jobfence: a handler for kind "batch" is already registered`; got != want {
				t.Errorf("panic %q; want %q", got, want)
			}
		}()
		worker.Add(reg, func(ctx context.Context, job *worker.Job[batchArgs]) error { return nil })
	}()
	err := worker.RecordBatchOutput(context.Background(), &queue.Job{ID: 1}, "x")
	if !errors.Is(err, worker.ErrNotInHandler) || err.Error() != "jobfence: record batch output: jobfence: not a job handler's context: not a batch handler's context" {
		t.Fatalf("RecordBatchOutput outside a batch: %v", err)
	}
}
