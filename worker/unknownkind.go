package worker

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// Put-backs of a job whose kind has no handler here. The likely cause is a
// rolling deploy, which ends within minutes: the job must run soon after
// an instance that knows its kind is up, not wait out a backoff that grew
// for hours meanwhile (the retry policy's n^4 s is 70 minutes at the 8th).
const (
	// maxUnknownKindDelay caps the wait between two put-backs of a job of
	// an unknown kind.
	maxUnknownKindDelay = time.Minute
	// unknownKindRecorded is how many put-backs in a row for an unknown
	// kind are recorded on a job's errors (and logged at Error). The wait
	// has reached maxUnknownKindDelay by then; later ones are counted
	// (Stats.UnknownKind, telemetry's jobfence.jobs.unknown_kind) and
	// logged at Debug only, so that a job of a kind that no worker handles
	// any more does not grow its row by an error a minute.
	unknownKindRecorded = 8
)

// unknownKindDelay is how long a job of an unknown kind waits before it can
// be claimed again, by the put-backs for an unknown kind it has had in a
// row: n² seconds at the nth (1 s, 4 s, 9 s, ...), at most
// maxUnknownKindDelay, less up to a tenth at random so that jobs put back
// together come back spread out.
func unknownKindDelay(job *queue.Job) time.Duration {
	n := time.Duration(min(queue.UnknownKindPutBacks(job.Errors)+1, unknownKindRecorded+1))
	d := min(n*n*time.Second, maxUnknownKindDelay)
	return d - rand.N(d/10)
}

// putBackUnknownKind puts back job, whose kind has no handler here,
// without spending its attempt.
func (w *Worker) putBackUnknownKind(ctx context.Context, job *queue.Job, r *running) {
	r.err = fmt.Errorf("%w %q: no handler registered in worker %s (it handles %v)", queue.ErrUnknownKind, job.Kind, w.cfg.ID, w.reg.Kinds())
	w.stats.snoozed.Add(1)
	w.stats.unknownKind.Add(1)
	delay := unknownKindDelay(job)
	if queue.UnknownKindPutBacks(job.Errors) >= unknownKindRecorded {
		w.logJob(ctx, slog.LevelDebug, "jobfence: job of unknown kind; put back without spending an attempt (not recorded: put back too often in a row)", job,
			slog.Any("err", r.err), slog.Duration("delay", delay))
		w.report(job, r, queue.OutcomeSnooze, delay, nil, "")
		return
	}
	w.logJob(ctx, slog.LevelError, "jobfence: job of unknown kind; put back without spending an attempt", job,
		slog.Any("err", r.err), slog.Duration("delay", delay))
	w.report(job, r, queue.OutcomeSnooze, delay, r.err, "")
}
