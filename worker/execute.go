package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// connError is a transactional handler's failure that was its database
// connection's, not its own: BEGIN failed, or the connection broke under
// the transaction in an outage (see txFailed). Its job is put back without
// spending an attempt; ran says the handler's transaction had begun, so
// the put-back counts towards queue.PutBackLimit.
type connError struct {
	err error
	ran bool
}

func (e *connError) Error() string { return e.err.Error() }
func (e *connError) Unwrap() error { return e.err }

// timeoutError is the cause of a handler's context ending at its timeout.
// A type rather than fmt.Errorf per job: formatting the message for every
// job, nearly all of which never time out, showed in a busy worker's CPU
// profile (docs/benchmarks/code.md).
type timeoutError time.Duration

func (e timeoutError) Error() string {
	return "jobfence: job timed out after " + time.Duration(e).String()
}

// execute runs one claimed job of f (nil for RunOne) and queues its
// outcome. It reports that the worker gave up on the handler (see
// settle): the runner must leave.
func (w *Worker) execute(f *queueFetch, job *queue.Job, until time.Time) (leave bool) {
	// Not derived from a worker-wide context: thousands of handlers
	// registering with one parent contend on its lock. Stop cancels them
	// one by one through the in-flight map instead.
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	r := &running{job: job, fetch: f, lease: job.Lease(), cancel: cancel, leaseUntil: until}
	r.rc = &runCtx{r: r, w: w, backend: w.backend, max: w.cfg.MaxOutputBytes, recorded: &w.stats.stepsRecorded, replayed: &w.stats.stepsReplayed}
	// Whatever path the attempt ends by, no progress timer outlives it
	// (the outcome's paths flush it first: see finishing).
	defer r.endProgress(false)
	// A path that stores no outcome (a lost job) stores no logs either:
	// later records go to the worker's logger only.
	defer r.takeLogs()
	ctx = context.WithValue(ctx, runCtxKey{}, r.rc)
	r.ctx = ctx
	if w.cfg.Hooks.JobStart != nil {
		ctx = w.cfg.Hooks.JobStart(ctx, job)
		r.ctx = ctx
	}
	if claimedPastDeadline(job) {
		w.discardPastDeadline(ctx, job, r)
		return
	}
	h := w.reg.handlers[job.Kind]
	if h == nil {
		// Most likely a rolling deploy: an instance that knows the kind
		// will run it. The job is put back without spending an attempt,
		// backing off briefly by how often it was put back.
		w.putBackUnknownKind(ctx, job, r)
		return
	}
	// The job's own timeout first (its insert's, or its args type's
	// stored by a typed insert), then its args type's (for a job inserted
	// untyped: a schedule's fire), then its kind's, then the worker's.
	timeout := job.Timeout
	if timeout == 0 {
		timeout = h.typeTimeout
	}
	if timeout == 0 {
		timeout = h.opts.Timeout
	}
	if timeout == 0 {
		timeout = w.cfg.JobTimeout
	}
	if timeout > 0 {
		var cancelT context.CancelFunc
		ctx, cancelT = context.WithTimeoutCause(ctx, timeout, timeoutError(timeout))
		defer cancelT()
	}
	if !job.Deadline.IsZero() {
		// Whichever of the timeout and the deadline comes first ends it.
		var cancelD context.CancelFunc
		ctx, cancelD = context.WithDeadlineCause(ctx, job.Deadline, &deadlineError{at: job.Deadline})
		defer cancelD()
	}
	r.ctxEnd, _ = ctx.Deadline()
	if !w.track(r) {
		w.stats.snoozed.Add(1)
		w.report(job, r, queue.OutcomeSnooze, 0, nil, "")
		return
	}

	if err := w.openArgs(job); err != nil {
		// The handler never sees the args: the attempt fails into the
		// retry policy, as a handler's error would.
		leave = w.settle(r)
		r.err = err
		w.logJob(ctx, slog.LevelError, "jobfence: job args cannot be decrypted; the attempt fails", job, slog.Any("err", err))
		w.outcome(ctx, job, r, err, "")
		return leave
	}
	var err error
	var stack string
	start := time.Now()
	if h.runTx != nil {
		var done bool
		done, stack, err = w.runTx(ctx, h, job, r, start)
		if done {
			w.untrack(r)
			return w.settle(r)
		}
	} else if h.runBatch != nil {
		stack, err = w.call(ctx, func(ctx context.Context, job *queue.Job) error { return w.joinBatch(ctx, job, r) }, job)
		// A panic of the batch's handler reaches each job as its error.
		if pe := (*PanicError)(nil); stack == "" && errors.As(err, &pe) {
			stack = pe.Stack
		}
	} else {
		stack, err = w.call(ctx, h.run, job)
	}
	leave = w.settle(r)
	r.took, r.err, r.panicked = time.Since(start), err, stack != ""
	w.outcome(ctx, job, r, err, stack)
	return leave
}

// call runs fn under the middleware, recovering a panic. Plain and
// transactional handlers both go through it, so middleware wraps both.
func (w *Worker) call(ctx context.Context, fn HandlerFunc, job *queue.Job) (stack string, err error) {
	defer func() {
		if v := recover(); v != nil {
			pe := &PanicError{Value: v, Stack: string(debug.Stack())}
			stack, err = pe.Stack, pe
		}
	}()
	for i := len(w.cfg.Middleware) - 1; i >= 0; i-- {
		fn = w.cfg.Middleware[i](fn)
	}
	return "", fn(ctx, job)
}

// runTx runs a transactional handler and, if it succeeds, completes the job
// under its fence in the same transaction. done reports that the outcome is
// settled (committed, or stale and rolled back) and reported to the
// JobEnd hook, and nothing more is to be reported. Failures of the
// transaction itself rather than of the handler are returned as *connError.
func (w *Worker) runTx(ctx context.Context, h *handler, job *queue.Job, r *running, start time.Time) (done bool, stack string, err error) {
	txb := w.backend.(TxBackend)
	tx, err := txb.BeginTx(ctx, w.cfg.Lease)
	if err != nil {
		// Nothing of the job ran: whatever the cause, it is put back.
		return false, "", &connError{err: err}
	}
	defer tx.Rollback(context.Background())
	r.rc.durable.mu.Lock()
	r.rc.durable.tx = tx
	r.rc.durable.mu.Unlock()
	stack, err = w.call(ctx, func(ctx context.Context, job *queue.Job) error { return h.runTx(ctx, tx, job) }, job)
	if err != nil {
		// A broken connection may be an outage's doing, unless the
		// handler's own context ended (a timeout): pgx closes a connection
		// whose query is cancelled, and a job that always times out must
		// spend its attempts.
		if ctx.Err() == nil {
			err = w.txFailed(ctx, tx, job, err)
		}
		return false, stack, err
	}
	w.finishing(r)
	// Its logs go before the completion, as a batch's do (see flush).
	if logs := r.takeLogs(); logs != nil {
		w.recordLogs([]pending{{f: queue.Finish{Lease: job.Lease()}, logs: logs}})
	}
	f := queue.Finish{Lease: job.Lease(), Outcome: queue.OutcomeComplete, Output: r.recordedOutput(), Workflow: job.WorkflowID != "",
		Trace: w.taskTrace(job, r)}
	if err := txb.FinishTx(ctx, tx, f); err != nil {
		if errors.Is(err, queue.ErrStaleFence) {
			w.stats.stale.Add(1)
			w.logJob(ctx, slog.LevelWarn, "jobfence: job was lost before its transaction committed; rolled back", job)
			r.took = time.Since(start)
			w.ended(r, JobEnd{Outcome: queue.OutcomeComplete, Stale: true})
			return true, "", nil
		}
		return false, "", w.txFailed(ctx, tx, job, err)
	}
	if w.afterCompleteTx != nil {
		w.afterCompleteTx(job)
	}
	// The fenced completion holds the job's row, so no rescue can take the
	// job before this commit: commit even if the handler's context ends now
	// (a heartbeat that waited on that row finds the job completed and
	// reports it lost). Cancelling the commit midway would leave its result
	// unknown to the worker. A holder frozen here loses the transaction
	// when the lease ends: the backend bounds it (see TxBackend).
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.Lease)
	defer cancel()
	if err := tx.Commit(cctx); err != nil {
		return false, "", w.txFailed(ctx, tx, job, fmt.Errorf("jobfence: commit: %w", err))
	}
	w.stats.completed.Add(1)
	if f.Workflow {
		w.releaseAfterCommit(ctx, job)
	}
	r.took = time.Since(start)
	w.ended(r, JobEnd{Outcome: queue.OutcomeComplete})
	return true, "", nil
}

// releaseAfterCommit releases the dependents that a workflow task's
// transactional completion left to release after its commit (a task with
// more dependents than the completion releases itself; see
// queue.DependentReleaser), bounded by the lease. A failure is logged:
// the workers' maintenance releases them.
func (w *Worker) releaseAfterCommit(ctx context.Context, job *queue.Job) {
	r, ok := w.backend.(queue.DependentReleaser)
	if !ok {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.Lease)
	defer cancel()
	if _, err := r.ReleaseDependents(rctx, []int64{job.ID}); err != nil {
		w.logJob(ctx, slog.LevelWarn, "jobfence: releasing the task's dependents failed; the workers' maintenance releases them", job,
			slog.Any("err", err))
	}
}

// outcome maps a handler's result to the outcome to report; r stays
// tracked until the outcome is recorded.
func (w *Worker) outcome(ctx context.Context, job *queue.Job, r *running, err error, stack string) {
	suspended := r.suspension()
	if err == nil && suspended == nil {
		w.report(job, r, queue.OutcomeComplete, 0, nil, "")
		return
	}
	cause := context.Cause(ctx)
	var snooze *snoozeError
	var limited *rateLimitedError
	var cancelled *cancelError
	var panicked *PanicError
	var conn *connError
	switch {
	case errors.Is(cause, ErrLeaseLost), errors.Is(cause, ErrJobCancelled):
		// The job is no longer ours: any outcome would be stale.
		w.logJob(ctx, slog.LevelWarn, "jobfence: handler ended after its job was lost", job, slog.Any("cause", cause), slog.Any("err", err))
		w.untrack(r)
		w.ended(r, JobEnd{Lost: true})
		return
	case suspended != nil:
		// Sleep or AwaitSignal: whatever the handler returned, the job
		// suspends, its steps recorded, its attempt given back.
		w.stats.snoozed.Add(1)
		w.stats.suspended.Add(1)
		r.await = suspended.await
		w.report(job, r, queue.OutcomeSnooze, suspended.d, nil, "")
		return
	case errors.Is(cause, ErrWorkerStopping):
		// Stop's deadline passed while the handler ran. Recorded, and
		// bounded, because a job that gets its worker restarted (a liveness
		// probe failing while it runs) would otherwise go round the fleet
		// for ever without a trace.
		w.logJob(ctx, slog.LevelWarn, "jobfence: worker stopped while the job ran; put back", job, slog.Any("err", err))
		w.putBack(ctx, job, r, 0, fmt.Errorf("%w: Stop's deadline passed while the job ran; the handler, cancelled, returned: %w", ErrWorkerStopping, err))
		return
	case errors.As(err, &snooze):
		w.stats.snoozed.Add(1)
		w.report(job, r, queue.OutcomeSnooze, snooze.d, nil, "")
		return
	case errors.As(err, &limited):
		w.stats.snoozed.Add(1)
		r.backoff = limited.d
		var recorded error
		if limited.err != nil {
			recorded = limited
		}
		w.report(job, r, queue.OutcomeSnooze, limited.d, recorded, "")
		return
	case errors.As(err, &cancelled):
		w.stats.cancelled.Add(1)
		w.report(job, r, queue.OutcomeCancel, 0, err, "")
		return
	case errors.As(err, &conn):
		// An outage is not the job's failure: it keeps its attempts.
		w.logJob(ctx, slog.LevelWarn, "jobfence: transactional handler's database connection failed; put back", job, slog.Any("err", err))
		if conn.ran {
			w.putBack(ctx, job, r, w.putBackDelay(job), err)
			return
		}
		w.stats.snoozed.Add(1)
		w.report(job, r, queue.OutcomeSnooze, w.putBackDelay(job), err, "")
		return
	case errors.Is(err, ErrDecodeArgs):
		w.stats.discarded.Add(1)
		w.logJob(ctx, slog.LevelError, "jobfence: job args do not decode; discarded", job, slog.Any("err", err))
		w.report(job, r, queue.OutcomeDiscard, 0, err, "")
		return
	case errors.As(err, &panicked):
		w.stats.panics.Add(1)
		w.logJob(ctx, slog.LevelError, "jobfence: handler panicked", job, slog.Any("panic", panicked.Value))
	}
	if cause != nil && ctx.Err() != nil && !errors.Is(err, cause) {
		err = fmt.Errorf("%w (%v)", err, cause)
	}
	if job.Attempt >= job.MaxAttempts {
		w.stats.discarded.Add(1)
	} else {
		w.stats.retried.Add(1)
	}
	w.report(job, r, queue.OutcomeRetry, w.retryDelay(job), err, stack)
}

// retryDelay is how long the retry policy has job wait. The backend adds
// it to its own clock, so a skewed host clock does not shift it.
func (w *Worker) retryDelay(job *queue.Job) time.Duration {
	return max(time.Until(w.cfg.RetryPolicy.NextRetry(job)), 0)
}

// putBackDelay spaces out the put-backs of a job that is not failing but
// cannot run here (its connection broke): the retry policy's backoff for
// the put-backs in a row it has had, so it grows while the cause lasts
// though the job's attempts stay unspent. A job of an unknown kind waits
// less (see unknownKindDelay).
func (w *Worker) putBackDelay(job *queue.Job) time.Duration {
	n := 1
	for i := len(job.Errors) - 1; i >= 0 && job.Errors[i].PutBack; i-- {
		n++
	}
	backoff := *job
	backoff.Attempt = n
	return w.retryDelay(&backoff)
}

// report queues an outcome; r is untracked once the outcome is recorded.
func (w *Worker) report(job *queue.Job, r *running, o queue.Outcome, delay time.Duration, err error, stack string) {
	w.reportRun(job, r, o, delay, err, stack, 0)
}

// reportRun is report for a put-back that is putBacks in a row (see
// queue.AttemptError.PutBacks), or for the attempt spent at the limit.
func (w *Worker) reportRun(job *queue.Job, r *running, o queue.Outcome, delay time.Duration, err error, stack string, putBacks int) {
	w.finishing(r)
	if d, derr := w.pastDeadlineOutcome(job, r, o, delay, err); d != o {
		o, err, putBacks = d, derr, 0
	}
	f := queue.Finish{Lease: job.Lease(), Outcome: o, Delay: delay, Workflow: job.WorkflowID != "",
		Limit: job.Limit, LimitPartition: job.LimitPartition, Queue: job.Queue, Dependents: job.Dependents,
		Backoff: r.backoff, Await: r.await}
	if o == queue.OutcomeComplete {
		f.Output, f.Trace = r.recordedOutput(), w.taskTrace(job, r)
	}
	if err != nil {
		f.Error = &queue.AttemptError{Attempt: job.Attempt, At: time.Now(), Error: err.Error(), Trace: stack,
			PutBack: o == queue.OutcomeSnooze, PutBacks: putBacks}
	}
	ended := o
	if o == queue.OutcomeRetry && job.Attempt >= job.MaxAttempts {
		ended = queue.OutcomeDiscard
	}
	p := pending{f: f, r: r, outcome: ended, logs: r.takeLogs()}
	if r.late {
		w.recordLate(p)
		return
	}
	w.finishCh <- p
}

// finishing marks r as past its handler, and writes the progress its
// handler reported and the throttle held back (see Progress), under the
// fence, before the outcome is sent.
func (w *Worker) finishing(r *running) {
	r.finishing.Store(true)
	r.endProgress(true)
}

// taskTrace is what Hooks.TaskTrace says of a workflow task's completing
// attempt, nil for any other job.
func (w *Worker) taskTrace(job *queue.Job, r *running) []byte {
	if job.WorkflowID == "" || w.cfg.Hooks.TaskTrace == nil {
		return nil
	}
	return w.cfg.Hooks.TaskTrace(r.ctx)
}

// openArgs replaces job's sealed args (queue.SealedPrefix) with their
// plaintext, opened by the worker's key ring; args not sealed are left as
// they are. The error is a *queue.KeyError.
func (w *Worker) openArgs(job *queue.Job) error {
	if _, sealed := queue.SealedKey(job.EncodedArgs); !sealed {
		return nil
	}
	plain, err := w.cfg.Encryption.Open(job.Kind, job.EncodedArgs)
	if err != nil {
		return err
	}
	job.EncodedArgs = plain
	return nil
}
