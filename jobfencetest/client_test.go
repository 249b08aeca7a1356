package jobfencetest_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobfence/jobfence"
	"github.com/jobfence/jobfence/jobfencetest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/worker"
)

// *jobfence.Client is what NewWorker and WaitFinal take.
var _ jobfencetest.Client = (*jobfence.Client)(nil)

// newChargeClient returns a jobfence.Client with chargeHandler on queues
// "default" and "refunds", and mw as its worker's middleware.
func newChargeClient(t *testing.T, db *jobfencetest.DB, mw ...worker.Middleware) *jobfence.Client {
	t.Helper()
	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, chargeHandler)
	c, err := jobfence.NewClient(db.Pool, jobfence.Config{
		Queues:   map[string]int{"default": 50, "refunds": 5},
		Handlers: reg,
		Logger:   slog.New(slog.DiscardHandler),
		Worker:   jobfencetest.WorkerConfig(worker.Config{Middleware: mw}),
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestNewWorkerFromClient: NewWorker runs the client's handlers with the
// client's worker configuration (its middleware here).
func TestNewWorkerFromClient(t *testing.T) {
	ctx := context.Background()
	db := jobfencetest.NewDB(t)
	var through atomic.Int64
	mw := func(next worker.HandlerFunc) worker.HandlerFunc {
		return func(ctx context.Context, job *queue.Job) error {
			through.Add(1)
			return next(ctx, job)
		}
	}
	client := newChargeClient(t, db, mw)
	w := jobfencetest.NewWorker(t, client)

	r := jobfencetest.Work(ctx, t, w, charge{Cents: 1}, nil)
	if r.Outcome != queue.OutcomeComplete || r.Job.State != queue.StateCompleted {
		t.Fatalf("Work: %s, want completed", r)
	}
	r = jobfencetest.Work(ctx, t, w, charge{Mode: "fail"}, &jobfence.InsertOpts{Queue: "refunds"})
	if r.Job.State != queue.StateRetryable || !errors.Is(r.Err, errDeclined) {
		t.Fatalf("Work on refunds: %s, want retryable with errDeclined", r)
	}
	if n := through.Load(); n != 2 {
		t.Errorf("the client's middleware ran %d times, want 2", n)
	}
	// The client's own configuration is left as it was.
	if q := client.WorkerConfig().Queues; q["default"] != 50 || q["refunds"] != 5 {
		t.Errorf("client's queues after NewWorker: %v, want default 50, refunds 5", q)
	}
}

// TestNewWorkerRefusesInsertOnlyClient: an insert-only client has no
// handlers to run, and the failure says so.
func TestNewWorkerRefusesInsertOnlyClient(t *testing.T) {
	db := jobfencetest.NewDB(t)
	client, err := jobfence.NewClient(db.Pool, jobfence.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var r recorder
	if w := jobfencetest.NewWorker(&r, client); w != nil {
		t.Fatal("NewWorker of an insert-only client returned a worker")
	}
	r.requireFailed(t, "insert-only", "no handlers", "Queues and Handlers")

	var n recorder
	var none *jobfence.Client
	jobfencetest.NewWorker(&n, none)
	n.requireFailed(t, "nil client")
}

// TestWaitFinal: WaitFinal returns the jobs a started client ran, in the
// order asked; a job that cannot end in time fails it, naming the job's
// state and why it waits.
func TestWaitFinal(t *testing.T) {
	ctx := context.Background()
	db := jobfencetest.NewDB(t)
	client := newChargeClient(t, db)
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(ctx)
	})
	var ids []int64
	for _, a := range []struct {
		args charge
		opts *jobfence.InsertOpts
	}{
		{charge{Cents: 1}, nil},
		{charge{Mode: "cancel"}, &jobfence.InsertOpts{Queue: "refunds"}},
		{charge{Mode: "fail"}, &jobfence.InsertOpts{MaxAttempts: 1}},
	} {
		res, err := client.Insert(ctx, a.args, a.opts)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ID)
	}
	jobs := jobfencetest.WaitFinal(ctx, t, client, ids...)
	want := []queue.State{queue.StateCompleted, queue.StateCancelled, queue.StateDiscarded}
	for i, j := range jobs {
		if j.ID != ids[i] || j.State != want[i] {
			t.Errorf("job %d: %d %s, want %d %s", i, j.ID, j.State, ids[i], want[i])
		}
	}

	// A job behind a limit whose one slot another job holds for ever (a
	// job in a queue that no worker works) waits, and says why.
	if err := client.Limits().Set(ctx, jobfence.Limit{Name: "one-charge", Queue: "held", Concurrency: 1}); err != nil {
		t.Fatal(err)
	}
	holder, err := client.Insert(ctx, charge{Cents: 2}, &jobfence.InsertOpts{Queue: "held"})
	if err != nil {
		t.Fatal(err)
	}
	waiting, err := client.Insert(ctx, charge{Cents: 3}, &jobfence.InsertOpts{Queue: "held"})
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	var r recorder
	if got := jobfencetest.WaitFinal(short, &r, client, holder.ID, waiting.ID); got != nil {
		t.Fatalf("WaitFinal returned %v for jobs that cannot end", got)
	}
	r.requireFailed(t, "2 of 2 jobs not final", "is the client started", "available", "limited", "one-charge")

	var gone recorder
	jobfencetest.WaitFinal(ctx, &gone, client, 999_999)
	gone.requireFailed(t, "job 999999", "not found")
}

// TestDrainGrantsLimitedJobs: Drain runs the jobs a Concurrency limit
// holds back, one after the other, as it grants them; a job over a Rate
// stays limited, and Drain returns without it.
func TestDrainGrantsLimitedJobs(t *testing.T) {
	ctx := context.Background()
	db := jobfencetest.NewDB(t)
	client := newChargeClient(t, db)
	limits := client.Limits()
	if err := limits.Set(ctx, jobfence.Limit{Name: "one-at-a-time", Queue: "default", Concurrency: 1}); err != nil {
		t.Fatal(err)
	}
	if err := limits.Set(ctx, jobfence.Limit{Name: "one-an-hour", Queue: "refunds", Rate: 1, Period: time.Hour}); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for i := range 3 {
		res, err := client.Insert(ctx, charge{Cents: i}, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ID)
	}
	if st, _ := client.Get(ctx, ids[2]); st.State != queue.StateLimited {
		t.Fatalf("third job is %s before Drain, want limited", st.State)
	}
	w := jobfencetest.NewWorker(t, client)
	rs := w.Drain(ctx, t, "default")
	if len(rs) != 3 {
		t.Fatalf("Drain ran %d jobs, want the 3 limited ones", len(rs))
	}
	for i, r := range rs {
		if r.Job.ID != ids[i] || r.Job.State != queue.StateCompleted {
			t.Errorf("result %d: %s, want job %d completed, in insert order", i, r, ids[i])
		}
	}

	var refunds []int64
	for range 2 {
		res, err := client.Insert(ctx, charge{}, &jobfence.InsertOpts{Queue: "refunds"})
		if err != nil {
			t.Fatal(err)
		}
		refunds = append(refunds, res.ID)
	}
	rs = w.Drain(ctx, t, "refunds")
	if len(rs) != 1 || rs[0].Job.ID != refunds[0] {
		t.Fatalf("Drain of the rate-limited queue ran %v, want the first job only", rs)
	}
	if j, err := client.Get(ctx, refunds[1]); err != nil || j.State != queue.StateLimited {
		t.Fatalf("second refund after Drain: %v, %v; want it limited (over the rate)", j, err)
	}
}
