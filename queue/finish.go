package queue

import "time"

// Outcome is what an attempt's end does to its job.
type Outcome int

// The outcomes a worker reports.
const (
	// OutcomeComplete marks the job completed.
	OutcomeComplete Outcome = iota + 1
	// OutcomeRetry records the error and makes the job ready again at At,
	// or discards it when it has had MaxAttempts attempts.
	OutcomeRetry
	// OutcomeDiscard records the error and gives up on the job.
	OutcomeDiscard
	// OutcomeSnooze makes the job ready again at At without spending an
	// attempt.
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
	// At is when a retried or snoozed job becomes ready again.
	At time.Time
	// Error is recorded on the job for retry, discard and cancel.
	Error *AttemptError
}
