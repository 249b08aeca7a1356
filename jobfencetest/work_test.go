package jobfencetest_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/jobfencetest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

type charge struct {
	Cents int    `json:"cents"`
	Mode  string `json:"mode"`
}

func (charge) Kind() string { return "charge" }

var errDeclined = errors.New("card declined")

// chargeHandler does what its args' Mode says, so one registry shows
// every outcome.
func chargeHandler(ctx context.Context, job *worker.Job[charge]) error {
	switch job.Args.Mode {
	case "fail":
		return errDeclined
	case "snooze":
		return worker.JobSnooze(time.Minute)
	case "cancel":
		return worker.JobCancel(errDeclined)
	case "panic":
		panic("boom")
	}
	return nil
}

func newChargeWorker(t *testing.T, db *jobfencetest.DB, cfg worker.Config) (*jobfencetest.Worker, *pgqueue.Client) {
	client := pgqueue.New(db.Pool, pgqueue.Config{})
	reg := worker.NewRegistry()
	worker.Add(reg, chargeHandler)
	return jobfencetest.NewPGWorker(t, client, reg, cfg), client
}

func TestWorkReturnsEachOutcome(t *testing.T) {
	ctx := context.Background()
	db := jobfencetest.NewDB(t)
	w, _ := newChargeWorker(t, db, worker.Config{})
	for _, tc := range []struct {
		mode    string
		opts    *queue.InsertOpts
		outcome queue.Outcome
		state   queue.State
		err     error
	}{
		{"ok", nil, queue.OutcomeComplete, queue.StateCompleted, nil},
		{"fail", nil, queue.OutcomeRetry, queue.StateRetryable, errDeclined},
		{"fail", &queue.InsertOpts{MaxAttempts: 1}, queue.OutcomeRetry, queue.StateDiscarded, errDeclined},
		{"snooze", nil, queue.OutcomeSnooze, queue.StateScheduled, nil},
		{"cancel", nil, queue.OutcomeCancel, queue.StateCancelled, errDeclined},
	} {
		r := jobfencetest.Work(ctx, t, w, charge{Cents: 100, Mode: tc.mode}, tc.opts)
		if r.Outcome != tc.outcome || r.Job.State != tc.state || r.Stale {
			t.Errorf("%s: %s; want outcome %s, state %s", tc.mode, r, tc.outcome, tc.state)
		}
		if tc.err != nil && !errors.Is(r.Err, tc.err) {
			t.Errorf("%s: Err = %v, want %v", tc.mode, r.Err, tc.err)
		}
		if tc.err == nil && tc.outcome != queue.OutcomeSnooze && r.Err != nil {
			t.Errorf("%s: Err = %v, want nil", tc.mode, r.Err)
		}
		if tc.outcome == queue.OutcomeSnooze && r.Delay != time.Minute {
			t.Errorf("snooze: Delay = %s, want 1m", r.Delay)
		}
	}
}

// TestWorkReportsADeletedCompletion: a job inserted with
// DeleteOnComplete is gone once it completes, and Work says so rather
// than fail reading it back.
func TestWorkReportsADeletedCompletion(t *testing.T) {
	ctx := context.Background()
	db := jobfencetest.NewDB(t)
	w, client := newChargeWorker(t, db, worker.Config{})
	r := jobfencetest.Work(ctx, t, w, charge{Cents: 1, Mode: "ok"}, &queue.InsertOpts{DeleteOnComplete: true})
	if !r.Deleted || r.Job.State != queue.StateCompleted || r.Outcome != queue.OutcomeComplete {
		t.Fatalf("Work = %s (deleted %v); want completed and deleted", r, r.Deleted)
	}
	if _, err := client.Get(ctx, r.Job.ID); !errors.Is(err, queue.ErrJobNotFound) {
		t.Fatalf("Get after a deleting completion: %v, want ErrJobNotFound", err)
	}
	if kept := jobfencetest.Work(ctx, t, w, charge{Cents: 1, Mode: "ok"}, nil); kept.Deleted {
		t.Fatalf("a job without DeleteOnComplete reported deleted: %s", kept)
	}
}

func TestWorkRecoversAPanicAsTheWorkerDoes(t *testing.T) {
	ctx := context.Background()
	db := jobfencetest.NewDB(t)
	w, _ := newChargeWorker(t, db, worker.Config{})
	r := jobfencetest.Work(ctx, t, w, charge{Mode: "panic"}, nil)
	var pe *worker.PanicError
	if !errors.As(r.Err, &pe) || r.Outcome != queue.OutcomeRetry {
		t.Fatalf("%s; want a retry with a *worker.PanicError", r)
	}
	if len(r.Job.Errors) != 1 || !strings.Contains(r.Job.Errors[0].Trace, "chargeHandler") {
		t.Fatalf("recorded errors %+v should hold the stack", r.Job.Errors)
	}
}

func TestWorkRunsTheMiddleware(t *testing.T) {
	ctx := context.Background()
	db := jobfencetest.NewDB(t)
	var seen atomic.Int64
	mw := func(next worker.HandlerFunc) worker.HandlerFunc {
		return func(ctx context.Context, job *queue.Job) error {
			seen.Store(job.Fence)
			return next(ctx, job)
		}
	}
	w, _ := newChargeWorker(t, db, worker.Config{Middleware: []worker.Middleware{mw}})
	r := jobfencetest.Work(ctx, t, w, charge{Mode: "ok"}, nil)
	if seen.Load() == 0 || seen.Load() != r.Job.Fence {
		t.Fatalf("middleware saw fence %d, the job's claim has %d", seen.Load(), r.Job.Fence)
	}
}

type ship struct {
	Order int  `json:"order"`
	Fail  bool `json:"fail"`
}

func (ship) Kind() string { return "ship" }

func TestWorkRunsTransactionalHandlersInTheirTransaction(t *testing.T) {
	ctx := context.Background()
	db := jobfencetest.NewDB(t)
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE shipments (order_id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	client := pgqueue.New(db.Pool, pgqueue.Config{})
	reg := worker.NewRegistry()
	worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[ship]) error {
		if _, err := tx.Exec(ctx, `INSERT INTO shipments VALUES ($1)`, job.Args.Order); err != nil {
			return err
		}
		if job.Args.Fail {
			return errDeclined
		}
		return nil
	})
	w := jobfencetest.NewPGWorker(t, client, reg, worker.Config{})

	r := jobfencetest.Work(ctx, t, w, ship{Order: 1}, nil)
	if r.Outcome != queue.OutcomeComplete || r.Job.State != queue.StateCompleted {
		t.Fatalf("%s; want completed", r)
	}
	r = jobfencetest.Work(ctx, t, w, ship{Order: 2, Fail: true}, nil)
	if r.Outcome != queue.OutcomeRetry || !errors.Is(r.Err, errDeclined) {
		t.Fatalf("%s; want a retry with the handler's error", r)
	}
	var orders []int
	rows, _ := db.Pool.Query(ctx, `SELECT order_id FROM shipments ORDER BY 1`)
	orders, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	if len(orders) != 1 || orders[0] != 1 {
		t.Fatalf("shipments %v: want only order 1 (the failed handler's write rolled back)", orders)
	}
}

func TestWorkNextRunsAJobYourCodeEnqueued(t *testing.T) {
	ctx := context.Background()
	db := jobfencetest.NewDB(t)
	w, client := newChargeWorker(t, db, worker.Config{})
	if _, err := client.Insert(ctx, charge{Mode: "ok"}, &queue.InsertOpts{Queue: "payments"}); err != nil {
		t.Fatal(err)
	}
	r := w.WorkNext(ctx, t, "payments")
	if r.Job.State != queue.StateCompleted || r.Job.Attempt != 1 || r.Job.Fence == 0 {
		t.Fatalf("%s (attempt %d, fence %d); want completed on the first attempt under a fence", r, r.Job.Attempt, r.Job.Fence)
	}
}

func TestWorkRefusesWhenAnotherJobWouldRunFirst(t *testing.T) {
	ctx := context.Background()
	db := jobfencetest.NewDB(t)
	w, client := newChargeWorker(t, db, worker.Config{})
	if _, err := client.Insert(ctx, charge{Mode: "ok", Cents: 7}, nil); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	if r := jobfencetest.Work(ctx, rec, w, charge{Mode: "ok"}, nil); r != nil {
		t.Fatalf("Work ran %s", r)
	}
	rec.requireFailed(t, `queue "default" already has ready jobs`, "WorkNext", `"cents": 7`)

	rec = &recorder{}
	jobfencetest.Work(ctx, rec, w, charge{}, &queue.InsertOpts{Queue: "later", ScheduledAt: time.Now().Add(time.Hour)})
	rec.requireFailed(t, "is in the future")

	rec = &recorder{}
	w.WorkNext(ctx, rec, "empty")
	rec.requireFailed(t, `no job ready to run in queue "empty"`)
}

type fanOut struct {
	N int `json:"n"`
}

func (fanOut) Kind() string { return "fan_out" }

func TestDrainRunsJobsTheHandlersEnqueue(t *testing.T) {
	ctx := context.Background()
	db := jobfencetest.NewDB(t)
	client := pgqueue.New(db.Pool, pgqueue.Config{})
	reg := worker.NewRegistry()
	// Each job enqueues the next, down to zero, in its own transaction.
	worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[fanOut]) error {
		if job.Args.N == 0 {
			return nil
		}
		_, err := client.InsertTx(ctx, tx, fanOut{N: job.Args.N - 1}, nil)
		return err
	})
	w := jobfencetest.NewPGWorker(t, client, reg, worker.Config{})
	if _, err := client.Insert(ctx, fanOut{N: 3}, nil); err != nil {
		t.Fatal(err)
	}
	results := w.Drain(ctx, t, queue.DefaultQueue)
	if len(results) != 4 {
		t.Fatalf("drained %d jobs, want 4 (3, 2, 1, 0)", len(results))
	}
	for _, r := range results {
		if r.Job.State != queue.StateCompleted {
			t.Fatalf("%s; want every job completed", r)
		}
	}
	if again := w.Drain(ctx, t, queue.DefaultQueue); len(again) != 0 {
		t.Fatalf("a drained queue ran %d more jobs", len(again))
	}
}

// flaky fails its first attempt and completes its second.
type flaky struct{}

func (flaky) Kind() string { return "flaky" }

// TestRetryNowRunsTheRetryAtOnce: a failed attempt's retry runs at once,
// under the worker's default retry policy, with a new attempt and fence.
func TestRetryNowRunsTheRetryAtOnce(t *testing.T) {
	ctx := context.Background()
	db := jobfencetest.NewDB(t)
	client := pgqueue.New(db.Pool, pgqueue.Config{})
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[flaky]) error {
		if job.Attempt == 1 {
			return errDeclined
		}
		return nil
	})
	w := jobfencetest.NewPGWorker(t, client, reg, worker.Config{})

	first := jobfencetest.Work(ctx, t, w, flaky{}, nil)
	if first.Outcome != queue.OutcomeRetry || first.Job.State != queue.StateRetryable || first.Delay <= 0 {
		t.Fatalf("%s, delay %s; want a retry that waits", first, first.Delay)
	}
	second := w.RetryNow(ctx, t, first)
	if second.Job.ID != first.Job.ID || second.Outcome != queue.OutcomeComplete || second.Job.State != queue.StateCompleted {
		t.Fatalf("%s; want job %d completed", second, first.Job.ID)
	}
	if second.Job.Attempt != 2 || second.Job.Fence <= first.Job.Fence || second.Job.MaxAttempts != first.Job.MaxAttempts {
		t.Fatalf("attempt %d, fence %d after %d, max attempts %d after %d; want attempt 2 under a greater fence and the same budget",
			second.Job.Attempt, second.Job.Fence, first.Job.Fence, second.Job.MaxAttempts, first.Job.MaxAttempts)
	}
}

// TestRetryNowRefusesWhatHasNoRetry names the state of a job that has no
// retry to run, and a job that would be claimed before the retry.
func TestRetryNowRefusesWhatHasNoRetry(t *testing.T) {
	ctx := context.Background()
	db := jobfencetest.NewDB(t)
	w, client := newChargeWorker(t, db, worker.Config{})

	done := jobfencetest.Work(ctx, t, w, charge{Mode: "ok"}, nil)
	r := &recorder{}
	if got := w.RetryNow(ctx, r, done); got != nil {
		t.Fatalf("RetryNow of a completed job returned %s", got)
	}
	r.requireFailed(t, "RetryNow: job", "is completed, not retryable")

	failed := jobfencetest.Work(ctx, t, w, charge{Mode: "fail"}, nil)
	if _, err := client.Insert(ctx, charge{Mode: "ok"}, nil); err != nil {
		t.Fatal(err)
	}
	r = &recorder{}
	if got := w.RetryNow(ctx, r, failed); got != nil {
		t.Fatalf("RetryNow behind a ready job returned %s", got)
	}
	r.requireFailed(t, `RetryNow: queue "default" already has ready jobs that would be claimed before the retry of job`)
}
