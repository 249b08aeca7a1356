package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// PanicError is the error recorded for a handler that panicked.
type PanicError struct {
	Value any
	Stack string
}

func (e *PanicError) Error() string { return fmt.Sprintf("jobfence: handler panicked: %v", e.Value) }

// execute runs one claimed job and queues its outcome.
func (w *Worker) execute(job *queue.Job, until time.Time) {
	h := w.reg.handlers[job.Kind]
	if h == nil {
		err := fmt.Errorf("%w %q: no handler registered in worker %s (it handles %v)", queue.ErrUnknownKind, job.Kind, w.cfg.ID, w.reg.Kinds())
		w.log.Error("jobfence: job of unknown kind; will retry", "job", job.ID, "kind", job.Kind, "err", err)
		w.report(job, nil, queue.OutcomeRetry, w.cfg.RetryPolicy.NextRetry(job), err, "")
		w.stats.retried.Add(1)
		return
	}
	timeout := h.opts.Timeout
	if timeout == 0 {
		timeout = w.cfg.JobTimeout
	}
	// Not derived from a worker-wide context: thousands of handlers
	// registering with one parent contend on its lock. Stop cancels them
	// one by one through the in-flight map instead.
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	if timeout > 0 {
		var cancelT context.CancelFunc
		ctx, cancelT = context.WithTimeoutCause(ctx, timeout, fmt.Errorf("jobfence: job timed out after %s", timeout))
		defer cancelT()
	}
	r := &running{lease: job.Lease(), cancel: cancel, leaseUntil: until}
	if !w.track(r) {
		w.stats.snoozed.Add(1)
		w.report(job, nil, queue.OutcomeSnooze, time.Now(), nil, "")
		return
	}

	var err error
	var stack string
	if h.runTx != nil {
		var done bool
		done, stack, err = w.runTx(ctx, h, job, r)
		if done {
			w.untrack(r)
			return
		}
	} else {
		stack, err = w.call(ctx, h, job)
	}
	w.outcome(ctx, job, r, err, stack)
}

// call runs a plain handler under the middleware, recovering a panic.
func (w *Worker) call(ctx context.Context, h *handler, job *queue.Job) (stack string, err error) {
	defer func() {
		if v := recover(); v != nil {
			pe := &PanicError{Value: v, Stack: string(debug.Stack())}
			stack, err = pe.Stack, pe
		}
	}()
	fn := h.run
	for i := len(w.cfg.Middleware) - 1; i >= 0; i-- {
		fn = w.cfg.Middleware[i](fn)
	}
	return "", fn(ctx, job)
}

// runTx runs a transactional handler and, if it succeeds, completes the job
// under its fence in the same transaction. done reports that the outcome is
// settled (committed, or stale and rolled back) and nothing more is to be
// reported.
func (w *Worker) runTx(ctx context.Context, h *handler, job *queue.Job, r *running) (done bool, stack string, err error) {
	txb := w.backend.(TxBackend)
	tx, err := txb.Begin(ctx)
	if err != nil {
		return false, "", err
	}
	defer tx.Rollback(context.Background())
	func() {
		defer func() {
			if v := recover(); v != nil {
				pe := &PanicError{Value: v, Stack: string(debug.Stack())}
				stack, err = pe.Stack, pe
			}
		}()
		err = h.runTx(ctx, tx, job)
	}()
	if err != nil {
		return false, stack, err
	}
	w.finishing(r)
	if err := txb.CompleteTx(ctx, tx, job.Lease()); err != nil {
		if errors.Is(err, queue.ErrStaleFence) {
			w.stats.stale.Add(1)
			w.log.Warn("jobfence: job was lost before its transaction committed; rolled back", "job", job.ID, "fence", job.Fence)
			return true, "", nil
		}
		return false, "", err
	}
	// The fenced completion holds the job's row, so no rescue can take the
	// job before this commit: commit even if the handler's context ends now
	// (a heartbeat that waited on that row finds the job completed and
	// reports it lost). Cancelling the commit midway would leave its result
	// unknown to the worker.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.Lease)
	defer cancel()
	if err := tx.Commit(cctx); err != nil {
		return false, "", fmt.Errorf("jobfence: commit: %w", err)
	}
	w.stats.completed.Add(1)
	return true, "", nil
}

// outcome maps a handler's result to the outcome to report; r stays
// tracked until the outcome is recorded.
func (w *Worker) outcome(ctx context.Context, job *queue.Job, r *running, err error, stack string) {
	if err == nil {
		w.report(job, r, queue.OutcomeComplete, time.Time{}, nil, "")
		return
	}
	cause := context.Cause(ctx)
	var snooze *snoozeError
	var cancelled *cancelError
	var panicked *PanicError
	switch {
	case errors.Is(cause, ErrLeaseLost), errors.Is(cause, ErrJobCancelled):
		// The job is no longer ours: any outcome would be stale.
		w.log.Warn("jobfence: handler ended after its job was lost", "job", job.ID, "cause", cause, "err", err)
		w.untrack(r)
		return
	case errors.Is(cause, ErrWorkerStopping):
		w.stats.snoozed.Add(1)
		w.report(job, r, queue.OutcomeSnooze, time.Now(), nil, "")
		return
	case errors.As(err, &snooze):
		w.stats.snoozed.Add(1)
		w.report(job, r, queue.OutcomeSnooze, time.Now().Add(snooze.d), nil, "")
		return
	case errors.As(err, &cancelled):
		w.stats.cancelled.Add(1)
		w.report(job, r, queue.OutcomeCancel, time.Time{}, err, "")
		return
	case errors.Is(err, ErrDecodeArgs):
		w.stats.discarded.Add(1)
		w.log.Error("jobfence: job args do not decode; discarded", "job", job.ID, "kind", job.Kind, "err", err)
		w.report(job, r, queue.OutcomeDiscard, time.Time{}, err, "")
		return
	case errors.As(err, &panicked):
		w.stats.panics.Add(1)
		w.log.Error("jobfence: handler panicked", "job", job.ID, "kind", job.Kind, "panic", panicked.Value)
	}
	if cause != nil && ctx.Err() != nil && !errors.Is(err, cause) {
		err = fmt.Errorf("%w (%v)", err, cause)
	}
	if job.Attempt >= job.MaxAttempts {
		w.stats.discarded.Add(1)
	} else {
		w.stats.retried.Add(1)
	}
	w.report(job, r, queue.OutcomeRetry, w.cfg.RetryPolicy.NextRetry(job), err, stack)
}

// report queues an outcome; r (nil for a job that never ran) is untracked
// once the outcome is recorded.
func (w *Worker) report(job *queue.Job, r *running, o queue.Outcome, at time.Time, err error, stack string) {
	w.finishing(r)
	f := queue.Finish{Lease: job.Lease(), Outcome: o, At: at}
	if err != nil {
		f.Error = &queue.AttemptError{Attempt: job.Attempt, At: time.Now(), Error: err.Error(), Trace: stack}
	}
	w.finishCh <- pending{f: f, r: r}
}

// finishing marks r (nil for a job that never ran) as past its handler.
func (w *Worker) finishing(r *running) {
	if r != nil {
		r.finishing.Store(true)
	}
}
