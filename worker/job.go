package worker

import (
	"errors"
	"fmt"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// Job is a claimed job with its arguments decoded. The embedded queue.Job
// carries the ID, Attempt, Fence and IdempotencyKey.
type Job[T queue.Args] struct {
	*queue.Job
	// Args is the job's decoded arguments.
	Args T
}

// ErrLeaseLost is the cause of a handler's context cancellation when the
// worker learnt that its claim was lost (rescued after its lease expired,
// claimed again, or its lease ran out while heartbeats failed). Anything the
// handler writes under its fence afterwards is rejected as stale.
var ErrLeaseLost = fmt.Errorf("jobfence: lease lost: %w", queue.ErrStaleFence)

// ErrJobCancelled is the cause of a handler's context cancellation when the
// job was cancelled while it ran.
var ErrJobCancelled = errors.New("jobfence: job cancelled")

// ErrWorkerStopping is the cause of a handler's context cancellation when
// Stop's deadline passed before the handler returned.
var ErrWorkerStopping = errors.New("jobfence: worker stopping")

// ErrDecodeArgs reports a job whose arguments do not decode into the
// handler's type. Such a job is discarded at once (retrying cannot help),
// with the error recorded on its row; `jobfence jobs retry` brings it back
// once a fixed handler is deployed.
var ErrDecodeArgs = errors.New("jobfence: job args do not decode")

// snoozeError asks for the job to run again after a delay.
type snoozeError struct{ d time.Duration }

func (e *snoozeError) Error() string { return fmt.Sprintf("jobfence: snooze %s", e.d) }

// JobSnooze returns an error that, returned by a handler, makes the job run
// again after d without spending an attempt.
func JobSnooze(d time.Duration) error { return &snoozeError{d: d} }

// cancelError asks for the job to be cancelled.
type cancelError struct{ err error }

func (e *cancelError) Error() string { return fmt.Sprintf("jobfence: job cancelled: %v", e.err) }
func (e *cancelError) Unwrap() error { return e.err }

// JobCancel returns an error that, returned by a handler, cancels the job
// with err recorded: it is not retried.
func JobCancel(err error) error { return &cancelError{err: err} }
