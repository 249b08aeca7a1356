package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// Hooks let a caller observe a worker: telemetry attaches through them, and
// so can anything else. Every field is optional; a nil field costs nothing.
// Hooks run on the worker's own goroutines, so they must be quick and safe
// for concurrent use.
type Hooks struct {
	// JobStart is called for every claimed job before anything else is
	// done with it (before its handler, and also for a job that cannot run
	// here and is put back). The context it returns is the one the
	// middleware and the handler get (it is derived from the one passed
	// in, which carries the handler's cancellation and timeout), and the
	// one JobEnd gets.
	JobStart func(ctx context.Context, job *queue.Job) context.Context
	// JobEnd is called exactly once for every job JobStart saw, once its
	// outcome is known: recorded by the backend, refused as stale, committed
	// with a transactional handler's transaction, or lost.
	JobEnd func(ctx context.Context, job *queue.Job, end JobEnd)
	// Claim is called after every claim round trip of a fetch loop or of
	// RunOne, and,
	// after a round trip that recorded outcomes and claimed the next jobs
	// of the limit slots they freed (queue.FinishClaimer), once for each
	// queue whose next jobs it asked for (ClaimInfo.Finish).
	Claim func(ctx context.Context, c ClaimInfo)
	// Finish is called after every round trip that records a batch of
	// outcomes, failed ones included.
	Finish func(ctx context.Context, f FinishInfo)
	// Rescue is called after every rescue round trip that moved jobs whose
	// lease had expired, with how many it moved.
	Rescue func(ctx context.Context, n int)
	// EndedSessions is called after every maintenance pass that ended
	// database sessions left holding the queue's locks by a client that
	// stopped mid-batch (queue.SessionReaper), with how many it ended.
	EndedSessions func(ctx context.Context, n int)
	// TaskTrace is called, with the handler's context, when a workflow
	// task's attempt completes; what it returns (a W3C traceparent, or nil)
	// is stored with the fenced completion (queue.Finish.Trace), and the
	// task's dependents carry it (queue.Job.DependencyTraces): telemetry
	// links their attempt spans to this attempt's. A worker with it set
	// reads, with each workflow task it claims, its dependencies' traces;
	// without it, Job.DependencyTraces is nil.
	TaskTrace func(ctx context.Context) []byte
}

// JobEnd is how a job's attempt ended.
type JobEnd struct {
	// Outcome is what the attempt asked of the backend: a failed attempt
	// of a job out of attempts is OutcomeDiscard, not OutcomeRetry. It is
	// zero for a job lost while its handler ran.
	Outcome queue.Outcome
	// Stale reports that the backend refused the outcome because the job
	// had been claimed again under a newer fence (for a transactional
	// handler: its transaction rolled back).
	Stale bool
	// Lost reports that the worker lost the job before its outcome could be
	// recorded: its lease was lost or the job was cancelled while the
	// handler ran, or the outcome could not be sent before the lease ran
	// out. Such a job is rescued (or stays cancelled).
	Lost bool
	// Stuck reports, with Lost, that the worker gave up on a handler that
	// kept running for Config.StuckGrace after its context ended; JobEnd
	// is called then, and not again if the handler returns at last.
	Stuck bool
	// Err is what the handler returned (a *PanicError for a panic), or why
	// the job could not run.
	Err error
	// Panicked reports that the handler panicked.
	Panicked bool
	// Duration is how long the handler ran; for a transactional handler
	// its transaction's begin and commit are included. Zero for a job
	// whose handler did not run.
	Duration time.Duration
}

// ClaimInfo describes one claim: a fetch loop's round trip, or what a
// round trip that recorded outcomes claimed in one queue (Finish).
type ClaimInfo struct {
	Queue string
	// Jobs is how many jobs the claim took, 0 for one that found none.
	Jobs int
	// Duration is the claim's round-trip time; with Finish, that of the
	// round trip that recorded the outcomes, which the Finish hook
	// reports too.
	Duration time.Duration
	// Err is why the claim failed. A claim by outcomes whose round trip
	// failed is not reported: the Finish hook reports the failure, and
	// the outcomes are sent again.
	Err error
	// Finish reports that the jobs were claimed by a round trip that
	// recorded outcomes (queue.FinishClaimer), into the limit slots they
	// freed, or by the release of the dependents of the workflow tasks
	// they completed, rather than by a fetch loop: counting Jobs over
	// every call counts every job this worker claimed, as Stats.Claimed
	// does.
	Finish bool
}

// FinishInfo describes one round trip that recorded outcomes.
type FinishInfo struct {
	// Jobs is how many outcomes the batch held; Stale how many of them the
	// backend refused as stale.
	Jobs, Stale int
	// Claimed is how many jobs the round trip claimed for this worker,
	// into the limit slots its outcomes freed (queue.FinishClaimer); they
	// count in Stats.Claimed too, and the Claim hook reports them per
	// queue (ClaimInfo.Finish).
	Claimed  int
	Duration time.Duration
	Err      error
}

// jobAttrs are the attributes of every log line about a job.
func jobAttrs(job *queue.Job, more ...slog.Attr) []slog.Attr {
	return append([]slog.Attr{
		slog.Int64("job", job.ID), slog.String("kind", job.Kind), slog.String("queue", job.Queue),
		slog.Int("attempt", job.Attempt), slog.Int64("fence", job.Fence),
	}, more...)
}

// logJob logs a line about job with the job's context, so a handler that
// adds the trace from the context (telemetry.LogHandler) can.
func (w *Worker) logJob(ctx context.Context, level slog.Level, msg string, job *queue.Job, more ...slog.Attr) {
	w.log.LogAttrs(ctx, level, msg, jobAttrs(job, more...)...)
}

// ended reports r's end to the backend's per-minute series
// (queue.SeriesRecorder) and to the JobEnd hook. Each job reaches it on
// one path only: stale or committed in its transaction, lost while
// running, or its outcome recorded (or given up on) by a completer; a
// handler the worker gave up on reaches it first from endGivenUp.
func (w *Worker) ended(r *running, end JobEnd) {
	if w.cfg.Hooks.JobEnd == nil && w.series == nil {
		return
	}
	// A handler given up on had its end reported then (see abandonRun).
	if !r.endReported.CompareAndSwap(false, true) {
		return
	}
	if end.Err == nil {
		end.Err = r.err
	}
	if w.series != nil {
		o := end.Outcome
		if end.Stale || end.Lost {
			o = 0
		}
		w.series.RecordAttempt(r.job, o, end.Err != nil && (o == queue.OutcomeRetry || o == queue.OutcomeDiscard))
	}
	if w.cfg.Hooks.JobEnd == nil {
		return
	}
	end.Duration = r.took
	end.Panicked = r.panicked
	w.cfg.Hooks.JobEnd(r.ctx, r.job, end)
}
