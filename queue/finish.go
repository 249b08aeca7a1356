package queue

import "time"

// Outcome is what an attempt's end does to its job.
type Outcome int

// The outcomes a worker reports.
const (
	// OutcomeComplete marks the job completed.
	OutcomeComplete Outcome = iota + 1
	// OutcomeRetry records the error and makes the job ready again after
	// Delay, or discards it when it has had MaxAttempts attempts.
	OutcomeRetry
	// OutcomeDiscard records the error and gives up on the job.
	OutcomeDiscard
	// OutcomeSnooze makes the job ready again after Delay without spending
	// an attempt, recording Error if it is set: a put-back for a reason that
	// is not the job's fault (a stopping worker, an unknown kind, a broken
	// connection).
	OutcomeSnooze
	// OutcomeCancel records the error and cancels the job.
	OutcomeCancel
)

func (o Outcome) String() string {
	switch o {
	case OutcomeComplete:
		return "complete"
	case OutcomeRetry:
		return "retry"
	case OutcomeDiscard:
		return "discard"
	case OutcomeSnooze:
		return "snooze"
	case OutcomeCancel:
		return "cancel"
	}
	return "unknown"
}

// Finish is one fenced outcome: it applies only if the job is still running
// under Lease.
type Finish struct {
	Lease
	Outcome Outcome
	// Delay is how long after the outcome is applied a retried or snoozed
	// job becomes ready again, by the backend's clock (the database's for
	// pgqueue), so a worker whose clock is skewed neither delays nor
	// hurries it.
	Delay time.Duration
	// Backoff, when positive, says that the job's provider refused it for
	// being over its rate (worker.JobRateLimited: a 429 and its
	// Retry-After): the limit partition the job belongs to grants no job
	// until Backoff has passed from the outcome, by the backend's clock,
	// or later where an earlier report asked for later (a backoff is
	// extended, never shortened). It applies with the outcome, whatever
	// the outcome (a snooze, or a discard where the snooze would pass
	// the job's deadline), and only if the outcome applies (a stale one
	// changes nothing). A job no limit governs, or a backend without
	// limits, ignores it.
	Backoff time.Duration
	// Await, for a snooze, is the signal the job's handler waits for
	// (worker.AwaitSignal): the backend records it with the job while it
	// waits, so that a signal of that name makes it ready before Delay
	// has passed, and makes it ready at once if such a signal is stored
	// already. Empty awaits none.
	Await string
	// Error is recorded on the job for retry, discard and cancel.
	Error *AttemptError
	// Output, for a completion, is the JSON the handler recorded: the
	// backend stores it with the fenced completion, so a stale attempt's
	// output is never stored. Nil stores none.
	Output []byte
	// Workflow marks the job as a workflow task: the backend releases its
	// dependents (or cancels them) with the outcome, under its fence.
	Workflow bool
	// Trace, for a workflow task's completion, is the attempt's W3C
	// traceparent (worker.Hooks.TaskTrace): the backend stores it with the
	// fenced completion, and the task's dependents carry it in
	// Job.DependencyTraces, so that their attempt spans link to it. Nil
	// stores none.
	Trace []byte
	// Limit and LimitPartition are the job's (Job.Limit): a backend that
	// hands limit slots out (pgqueue) sends the grant of the slot this
	// outcome frees in the outcome's round trip. Empty: it grants after
	// the outcome instead, in a round trip of its own, in the partition
	// the outcome returned. A wrong value costs a grant that finds nothing.
	Limit          string
	LimitPartition string
	// ClaimNext, for a FinishClaimer, says that the caller has room to run
	// one more job of this job's queue: the job granted the limit slot
	// this outcome frees may be claimed for it in the outcome's round
	// trip (FinishClaimer.FinishClaim). Other backends ignore it.
	ClaimNext bool
	// Queue and Dependents are the job's (Job.Queue, Job.Dependents): a
	// FinishClaimer given FinishClaimParams.Slots claims, into free slots
	// of Queue, the dependents that a workflow task's completion releases,
	// and reserves them by Dependents. Other backends ignore them.
	Queue      string
	Dependents int
}

// MaxOutputBytes is the default cap on a job's recorded output
// (worker.Config.MaxOutputBytes).
const MaxOutputBytes = 1 << 20
