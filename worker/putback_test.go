package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

var _ worker.OutageChecker = (*pgqueue.Client)(nil)

// runUntilFinal waits until job id is final or its handler has run more
// than want times (a put-back loop), and returns the job and the runs.
func runUntilFinal(t *testing.T, c *pgqueue.Client, id int64, runs *atomic.Int64, want int64) (*queue.Job, int64) {
	t.Helper()
	testwatch.WaitFor(t, 30*time.Second, "the job final or run too often", func() bool {
		return runs.Load() > want || stateOf(t, c, id).State.Final()
	})
	return stateOf(t, c, id), runs.Load()
}

// TestTxIdleTimeoutSpendsTheAttempt: a transactional handler that waits
// inside its transaction past the lease (an HTTP call made mid-transaction)
// has its session ended by PostgreSQL (idle_in_transaction_session_timeout,
// SQLSTATE 25P03). That is its own failure, not an outage: each run spends
// an attempt, and the job is discarded after MaxAttempts runs.
func TestTxIdleTimeoutSpendsTheAttempt(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: effectArgs{}.Kind(), MaxAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	// Long enough that heartbeats (every lease/3) keep the job on a
	// loaded machine: a missed lease ends the attempt another way.
	const lease = 1500 * time.Millisecond
	var runs atomic.Int64
	reg := worker.NewRegistry()
	worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[effectArgs]) error {
		runs.Add(1)
		if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
			return err
		}
		// Heartbeats keep the job's lease; the transaction sits idle.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(lease + lease/2):
		}
		_, err := tx.Exec(ctx, "SELECT 1")
		return err
	})
	startWorker(t, c, reg, worker.Config{Lease: lease, PollInterval: 50 * time.Millisecond,
		RetryPolicy: worker.ExponentialRetry{Max: 50 * time.Millisecond}})
	j, n := runUntilFinal(t, c, res.ID, &runs, 2)
	if j.State != queue.StateDiscarded || n != 2 || j.Attempt != 2 || len(j.Errors) != 2 {
		t.Fatalf("job %s after %d runs, attempt %d, errors %+v; want discarded after 2 runs, each spending its attempt", j.State, n, j.Attempt, j.Errors)
	}
	for _, e := range j.Errors {
		if e.PutBack || !strings.Contains(e.Error, "25P03") {
			t.Fatalf("errors %+v; want each attempt spent on its idle-in-transaction timeout (25P03)", j.Errors)
		}
	}
	t.Logf("the error a user sees: %s", j.Errors[0].Error)
}

// TestTxTerminatedBackendSpendsTheAttempt: a handler's own backend is
// terminated (pg_terminate_backend from another connection) while the
// server stays up. The closed connection is not an outage, as the worker
// checks: the attempt is spent, here the only one.
func TestTxTerminatedBackendSpendsTheAttempt(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: effectArgs{}.Kind(), MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	reg := worker.NewRegistry()
	worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[effectArgs]) error {
		runs.Add(1)
		var pid int
		if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			return err
		}
		// Waits until the backend is gone.
		if _, err := db.Pool.Exec(ctx, "SELECT pg_terminate_backend($1, 10000)", pid); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "SELECT 1")
		return err
	})
	startWorker(t, c, reg, worker.Config{PollInterval: 50 * time.Millisecond})
	j, n := runUntilFinal(t, c, res.ID, &runs, 1)
	if j.State != queue.StateDiscarded || n != 1 || j.Attempt != 1 || len(j.Errors) != 1 || j.Errors[0].PutBack ||
		!strings.Contains(j.Errors[0].Error, "the database stayed up") {
		t.Fatalf("job %s after %d runs, attempt %d, errors %+v; want discarded after its one attempt", j.State, n, j.Attempt, j.Errors)
	}
	t.Logf("the error a user sees: %s", j.Errors[0].Error)
}

// assumedOutage is a pgqueue.Client seen only as a TxBackend that
// promotes, with no OutageChecker: the worker takes every closed
// connection for an outage.
type assumedOutage struct {
	worker.TxBackend
	queue.Promoter
}

// checkPutBacks checks that errs are put-backs numbered 1, 2, ... and, if
// spent, end with the attempt spent at queue.PutBackLimit.
func checkPutBacks(t *testing.T, errs []queue.AttemptError, spent bool, want string) {
	t.Helper()
	for i, e := range errs {
		last := spent && i == len(errs)-1
		if e.PutBacks != i+1 || e.PutBack == last || !strings.Contains(e.Error, want) ||
			last != strings.Contains(e.Error, worker.ErrPutBackLimit.Error()) {
			t.Fatalf("errors %+v; want put-backs 1.. recording %q, the last spending the attempt: %v", errs, want, spent)
		}
	}
}

// TestPutBacksInARowAreBounded: a transactional handler whose connection
// closes under it every time, on a backend that takes that for an outage,
// is put back twice, each put-back recorded on the job; the third in a row
// spends the attempt, here the job's only one.
func TestPutBacksInARowAreBounded(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: effectArgs{}.Kind(), MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	reg := worker.NewRegistry()
	worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[effectArgs]) error {
		runs.Add(1)
		if err := tx.Conn().Close(ctx); err != nil {
			return err
		}
		return errors.New("connection closed")
	})
	startWorker(t, assumedOutage{c, c}, reg, worker.Config{PollInterval: 50 * time.Millisecond,
		RetryPolicy: worker.ExponentialRetry{Max: 50 * time.Millisecond}})
	j, n := runUntilFinal(t, c, res.ID, &runs, queue.PutBackLimit)
	if j.State != queue.StateDiscarded || n != queue.PutBackLimit || j.Attempt != 1 || len(j.Errors) != queue.PutBackLimit {
		t.Fatalf("job %s after %d runs, attempt %d, errors %+v; want discarded after %d runs", j.State, n, j.Attempt, j.Errors, queue.PutBackLimit)
	}
	checkPutBacks(t, j.Errors, true, "connection closed")
	t.Logf("the errors a user sees: %q, %q", j.Errors[0].Error, j.Errors[2].Error)
}

// TestStopPutBacksAreRecordedAndBounded: a worker's Stop times out while a
// handler ignores its cancellation (as when a liveness probe fails while
// the job runs and the worker is restarted). Each such put-back is
// recorded on the job; the third in a row spends the attempt.
func TestStopPutBacksAreRecordedAndBounded(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: sleepArgs{}.Kind(), MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, 1)
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[sleepArgs]) error {
		started <- struct{}{}
		<-ctx.Done()
		time.Sleep(200 * time.Millisecond) // past Stop's deadline
		return ctx.Err()
	})
	for i := 1; i <= queue.PutBackLimit; i++ {
		w := startWorker(t, c, reg, worker.Config{PollInterval: 50 * time.Millisecond})
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatalf("stop %d: the job did not start", i)
		}
		sctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		err := w.Stop(sctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("stop %d = %v, want it to time out", i, err)
		}
		testwatch.WaitFor(t, 30*time.Second, "the put-back recorded", func() bool { return len(stateOf(t, c, res.ID).Errors) == i })
		j := stateOf(t, c, res.ID)
		spent := i == queue.PutBackLimit
		if spent && (j.State != queue.StateDiscarded || j.Attempt != 1) || !spent && (j.State != queue.StateAvailable || j.Attempt != 0) {
			t.Fatalf("after stop %d: job %s, attempt %d, errors %+v", i, j.State, j.Attempt, j.Errors)
		}
		checkPutBacks(t, j.Errors, spent, "worker stopping: Stop's deadline passed while the job ran")
	}
}
