package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// A job's deadline (queue.EnqueueParams.Deadline) is kept at three points
// of its life here, and at two in the backend:
//
//   - Claimed at or after its deadline (by the claim's time, the
//     database's clock for pgqueue), it is discarded unrun with that
//     reason (discardPastDeadline): the check costs a claim nothing, and no job
//     starts past its deadline whichever worker claims it. pgqueue's
//     promoter also discards the jobs not started whose deadline has
//     passed (waiting for their time, a claim, a limit's slot or their
//     workflow dependencies), every PromoteInterval, so that a job no
//     claim reaches (a paused queue, a queue no worker takes, a backlog)
//     shows discarded about that long after its deadline rather than when
//     a claim finally finds it.
//   - Running, its handler's context ends at the deadline, or at its
//     timeout if that comes first, with a cause that errors.Is
//     queue.ErrDeadline.
//   - A retry or snooze (a put-back included) that would make it ready
//     after its deadline discards it instead (reportRun), the reason
//     appended to the attempt's error; the backend checks the same by its
//     own clock (pgqueue's finish and rescue), so that a worker whose
//     clock runs slow cannot schedule an attempt past it.

// deadlineError is the cause of a handler's context ending at its job's
// deadline.
type deadlineError struct{ at time.Time }

func (e *deadlineError) Error() string {
	return "jobfence: job deadline passed (" + e.at.UTC().Format(time.RFC3339Nano) + ")"
}

// Is makes errors.Is(err, queue.ErrDeadline) true.
func (e *deadlineError) Is(target error) bool { return target == queue.ErrDeadline }

// claimedPastDeadline reports whether job was claimed at or after its deadline.
func claimedPastDeadline(job *queue.Job) bool {
	if job.Deadline.IsZero() {
		return false
	}
	at := job.AttemptedAt
	if at.IsZero() {
		at = time.Now()
	}
	return !at.Before(job.Deadline)
}

// discardPastDeadline discards job, claimed at or after its deadline, without
// running it.
func (w *Worker) discardPastDeadline(ctx context.Context, job *queue.Job, r *running) {
	r.err = fmt.Errorf("%w: not started by %s (claimed at %s); discarded", queue.ErrDeadline,
		job.Deadline.UTC().Format(time.RFC3339Nano), job.AttemptedAt.UTC().Format(time.RFC3339Nano))
	w.stats.discarded.Add(1)
	w.logJob(ctx, slog.LevelWarn, "jobfence: job not started by its deadline; discarded", job, slog.Any("err", r.err))
	w.report(job, r, queue.OutcomeDiscard, 0, r.err, "")
}

// pastDeadlineOutcome turns an outcome that would make job ready again after its
// deadline (a retry with attempts left, or a snooze, delay from now) into
// a discard, its error err with the reason appended; it returns o and err
// unchanged otherwise. The caller counted o already: the count moves to
// the discards.
func (w *Worker) pastDeadlineOutcome(job *queue.Job, r *running, o queue.Outcome, delay time.Duration, err error) (queue.Outcome, error) {
	if job.Deadline.IsZero() || !(o == queue.OutcomeSnooze || o == queue.OutcomeRetry && job.Attempt < job.MaxAttempts) {
		return o, err
	}
	next := time.Now().Add(delay)
	if !next.After(job.Deadline) {
		return o, err
	}
	if o == queue.OutcomeRetry {
		w.stats.retried.Add(-1)
	} else {
		w.stats.snoozed.Add(-1)
		if errors.Is(r.err, queue.ErrUnknownKind) {
			w.stats.unknownKind.Add(-1)
		}
	}
	w.stats.discarded.Add(1)
	late := fmt.Errorf("%w: its next attempt would start at %s, after its deadline %s; discarded", queue.ErrDeadline,
		next.UTC().Format(time.RFC3339Nano), job.Deadline.UTC().Format(time.RFC3339Nano))
	if err != nil {
		late = fmt.Errorf("%w; %w", err, late)
	}
	r.err = late
	return queue.OutcomeDiscard, late
}
