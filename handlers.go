package jobfence

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/worker"
)

// The types a service names most, so that the common case imports this
// package alone. Each is the type of the package underneath, not a copy:
// a *jobfence.Registry is a *worker.Registry, a jobfence.InsertOpts a
// queue.InsertOpts.
type (
	// Args is implemented by a job's typed arguments: Kind names the
	// handler that runs them, and the value is stored as JSON. See
	// queue.Args.
	Args = queue.Args
	// Encryption configures the encryption of jobs' args: the keys by ID,
	// the current one, the key of the unique hash, and whether all jobs are
	// encrypted. See queue.Encryption.
	Encryption = queue.Encryption
	// EncryptedArgs is implemented by an args type whose jobs are stored
	// encrypted. See queue.EncryptedArgs.
	EncryptedArgs = queue.EncryptedArgs

	// InsertOpts are the optional settings of an insert (queue,
	// priority, scheduled time, attempts, unique key, metadata); nil or
	// the zero value takes every default. See queue.InsertOpts.
	InsertOpts = queue.InsertOpts

	// UniqueOpts make an insert refuse a duplicate while a job of the
	// same kind (and, as asked, args, queue, period) is unfinished, or in
	// the states it names; Debounce moves an unstarted duplicate's time
	// instead. See queue.UniqueOpts.
	UniqueOpts = queue.UniqueOpts

	// InsertResult is what one insert did: the job's ID and state, and
	// whether it was inserted (false when a job with the same unique key
	// was already stored; ID and State are then that job's). See
	// queue.EnqueueResult.
	InsertResult = queue.EnqueueResult

	// Registry maps job kinds to handlers: Config.Handlers. See
	// worker.Registry.
	Registry = worker.Registry

	// HandlerOptions tunes one kind's handler (its timeout). See
	// worker.HandlerOptions.
	HandlerOptions = worker.HandlerOptions

	// BatchOpts tunes a batch handler (AddBatchHandler): the most jobs
	// one call gets (MaxSize, default 100), how long a batch waits to
	// fill (Linger, default 100ms), each job's timeout. See
	// worker.BatchOpts.
	BatchOpts = worker.BatchOpts
)

// Job is a claimed job with its arguments decoded, as a handler gets it:
// its ID, Attempt, Fence and IdempotencyKey come from the embedded
// queue.Job. See worker.Job.
type Job[T Args] = worker.Job[T]

// NewRegistry returns an empty Registry, for Config.Handlers.
func NewRegistry() *Registry { return worker.NewRegistry() }

// AddHandler registers fn as the handler of T's kind, as worker.Add does
// (River's AddWorker). It panics if the kind is registered already: that
// is a programming error, found at start.
func AddHandler[T Args](r *Registry, fn func(ctx context.Context, job *Job[T]) error, opts ...HandlerOptions) {
	worker.Add(r, fn, opts...)
}

// AddHandlerTx registers fn as the transactional handler of T's kind, as
// worker.AddTx does: fn's writes through tx and the job's fenced
// completion commit in one transaction, so a worker that lost the job
// (paused past its lease, and the job claimed again) changes nothing. It
// panics if the kind is registered already.
func AddHandlerTx[T Args](r *Registry, fn func(ctx context.Context, tx pgx.Tx, job *Job[T]) error, opts ...HandlerOptions) {
	worker.AddTx(r, fn, opts...)
}

// AddBatchHandler registers fn as the batch handler of T's kind, as
// worker.AddBatch does: a worker hands up to opts.MaxSize claimed jobs of
// the kind to one call of fn (one bulk API call for many jobs), waiting
// at most opts.Linger to fill a batch. Each job keeps its own claim,
// fence, attempt and outcome: fn returns one result per job, in order
// (nil completes it; an error, JobSnooze or JobCancel is that job's
// alone), and a job whose claim was lost meanwhile has its outcome
// refused alone. A result slice of the wrong length fails every job with
// an error wrapping ErrBatchResults; a panic fails every job. It panics
// if the kind is registered already or opts are invalid.
func AddBatchHandler[T Args](r *Registry, fn func(ctx context.Context, jobs []*Job[T]) []error, opts ...BatchOpts) {
	worker.AddBatch(r, fn, opts...)
}

// RecordBatchOutput stores v (as JSON) as the output of job, one of the
// jobs of the batch whose handler's context ctx is, written with that
// job's fenced completion. See worker.RecordBatchOutput.
func RecordBatchOutput(ctx context.Context, job *queue.Job, v any) error {
	return worker.RecordBatchOutput(ctx, job, v)
}

// JobRateLimited returns an error that, returned by a handler, reports
// that the job's provider refused it for being over its rate (an HTTP
// 429): the job runs again after retryAfter without spending its attempt,
// and its limit partition grants nothing until then. See
// worker.JobRateLimited.
func JobRateLimited(retryAfter time.Duration, err error) error {
	return worker.JobRateLimited(retryAfter, err)
}

// RetryAfter reads an HTTP response's Retry-After header (seconds or an
// HTTP-date, taken from now); 0 when it is absent, malformed or past. See
// worker.RetryAfter.
func RetryAfter(h http.Header, now time.Time) time.Duration { return worker.RetryAfter(h, now) }

// JobSnooze returns an error that, returned by a handler, runs the job
// again after d without spending its attempt. See worker.JobSnooze.
func JobSnooze(d time.Duration) error { return worker.JobSnooze(d) }

// JobCancel returns an error that, returned by a handler, ends the job
// cancelled, with err recorded, and no retry. See worker.JobCancel.
func JobCancel(err error) error { return worker.JobCancel(err) }

// RecordOutput stores v (as JSON) as the output of the job whose handler's
// context ctx is, written with its fenced completion: a workflow's
// dependents read it (workflow.Output), and so does Get. See
// worker.RecordOutput.
func RecordOutput(ctx context.Context, v any) error { return worker.RecordOutput(ctx, v) }

// Progress stores v (as JSON, at most Worker.MaxProgressBytes) as the
// progress of the job whose handler's context ctx is, for Get, `jobfence
// jobs show` and the dashboard to show while the job runs; it stays after
// the job ends. Writes are fenced (a stale attempt's return an error
// wrapping ErrStaleFence and change nothing) and throttled to one per
// Worker.ProgressInterval, the latest value kept and written before the
// attempt's outcome. See worker.Progress.
func Progress(ctx context.Context, v any) error { return worker.Progress(ctx, v) }

// Logger returns the logger of the handler whose context ctx is: each
// record goes to the client's logger (Config.Logger) with the job's
// attributes, and is kept for the attempt, within Worker.AttemptLogs's
// bounds, and stored with it just before its outcome, under its fence, for
// Get (Job.Logs), `jobfence jobs show` and the dashboard's job page.
// Outside a handler it writes to the client's logger only (slog.Default()
// outside any worker). See worker.Logger.
func Logger(ctx context.Context) *slog.Logger { return worker.Logger(ctx) }

// Errors a handler may see or return; test for them with errors.Is.
var (
	// ErrStaleFence reports a write by an owner whose claim was lost to a
	// newer one (a pause, a partition): nothing was written.
	ErrStaleFence = queue.ErrStaleFence
	// ErrLeaseLost is the cause of a handler's context when its worker
	// lost the job's lease; it wraps ErrStaleFence.
	ErrLeaseLost = worker.ErrLeaseLost
	// ErrJobCancelled is the cause of a handler's context when the job
	// was cancelled while it ran.
	ErrJobCancelled = worker.ErrJobCancelled
	// ErrBatchResults is wrapped by the error of every job of a batch
	// whose handler returned a result slice of the wrong length.
	ErrBatchResults = worker.ErrBatchResults
	// ErrProgressTooLarge is wrapped by Progress's error for a value whose
	// JSON is longer than Worker.MaxProgressBytes: nothing is stored.
	ErrProgressTooLarge = worker.ErrProgressTooLarge
)
