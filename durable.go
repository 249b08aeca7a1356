package jobfence

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// Durable jobs (docs/durable.md): steps recorded once under the fence,
// sleeps and signal waits that free the worker while the job waits.

// Errors of durable jobs; test for them with errors.Is.
var (
	// ErrSuspended is wrapped by the error Sleep and AwaitSignal return
	// when the job suspends: the handler returns it.
	ErrSuspended = worker.ErrSuspended
	// ErrSignalTimeout is wrapped by AwaitSignal's error when its timeout
	// passed with no signal.
	ErrSignalTimeout = worker.ErrSignalTimeout
	// ErrNotDurable reports Step, Sleep or AwaitSignal in a job whose
	// backend records no steps (Kafka).
	ErrNotDurable = worker.ErrNotDurable
	// ErrSuspendInTx reports Sleep or AwaitSignal in a transactional
	// handler (AddHandlerTx), whose transaction a suspension would roll
	// back.
	ErrSuspendInTx = worker.ErrSuspendInTx
	// ErrBadStepName reports a step name that is empty, longer than 200
	// bytes, or starts with the reserved "jobfence:".
	ErrBadStepName = worker.ErrBadStepName
	// ErrNotInHandler reports Step, Sleep, AwaitSignal or RecordOutput
	// called with a context that is not a job handler's.
	ErrNotInHandler = worker.ErrNotInHandler
	// ErrJobFinished reports a Signal to a job that has finished: no wait
	// of it would take the signal.
	ErrJobFinished = pgqueue.ErrJobFinished
	// ErrBadSignal reports a signal whose name or payload cannot be
	// stored (empty or too long a name, a payload that is not JSON or
	// larger than 1 MiB).
	ErrBadSignal = pgqueue.ErrBadSignal
)

// Step runs fn once for the job whose handler's context ctx is, across
// all its attempts: its first success is recorded under the attempt's
// fence, and every later attempt returns the recorded result instead of
// running fn again. See worker.Step.
func Step[T any](ctx context.Context, name string, fn func(ctx context.Context) (T, error)) (T, error) {
	return worker.Step(ctx, name, fn)
}

// StepKey returns, inside a step's function, the step's idempotency key
// (the job's and the step's name), for an outside call. See
// worker.StepKey.
func StepKey(ctx context.Context) string { return worker.StepKey(ctx) }

// Sleep suspends the job for d, by the database's clock, without spending
// its attempt or holding a worker: the handler returns the error (it
// wraps ErrSuspended), and the job resumes after d, its recorded steps
// replayed, this Sleep returning nil. See worker.Sleep.
func Sleep(ctx context.Context, d time.Duration) error { return worker.Sleep(ctx, d) }

// SleepUntil is Sleep until t.
func SleepUntil(ctx context.Context, t time.Time) error { return worker.SleepUntil(ctx, t) }

// AwaitSignal waits for signal name sent to the job (Client.Signal), for
// timeout at most, and returns its payload; with none there yet, the job
// suspends (the handler returns the error) and resumes when it arrives
// or the timeout passes (ErrSignalTimeout). See worker.AwaitSignal.
func AwaitSignal[T any](ctx context.Context, name string, timeout time.Duration) (T, error) {
	return worker.AwaitSignal[T](ctx, name, timeout)
}

// Signal sends signal name with payload (encoded as JSON) to job id: its
// next wait for name (AwaitSignal) takes it, each signal once, oldest
// first, and a job suspended in such a wait runs again at once. A signal
// sent before the wait is kept for it. It returns an error wrapping
// ErrJobNotFound for an unknown job, ErrJobFinished for a finished one.
func (c *Client) Signal(ctx context.Context, id int64, name string, payload any) error {
	return c.pg.Signal(ctx, id, name, payload)
}

// SignalByKey is Signal to the unfinished job that holds unique key key
// (InsertOpts.UniqueKey), for a caller that knows its own key (an order
// number) rather than the job's ID; it returns the job's ID.
func (c *Client) SignalByKey(ctx context.Context, key, name string, payload any) (int64, error) {
	return c.pg.SignalByKey(ctx, key, name, payload)
}

// SignalTx is Signal inside the caller's transaction: the signal exists,
// and wakes the job, only if tx commits. It locks none of the job's rows,
// so an open tx holds up no worker.
func (c *Client) SignalTx(ctx context.Context, tx pgx.Tx, id int64, name string, payload any) error {
	return c.pg.SignalTx(ctx, tx, id, name, payload)
}
