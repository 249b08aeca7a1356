package queue

import (
	"errors"
	"fmt"
)

// ErrStaleFence reports a write made under a fence that is no longer the
// current one: the writer lost its claim (its lease expired and the job or
// key was claimed again), and the write changed nothing.
var ErrStaleFence = errors.New("jobfence: stale fence: the claim was lost to a newer owner; nothing was written")

// ErrUnknownKind reports a job whose kind has no registered handler.
var ErrUnknownKind = errors.New("jobfence: unknown job kind")

// ErrJobNotFound reports a job ID that names no stored job.
var ErrJobNotFound = errors.New("jobfence: job not found")

// ErrDeadline is the reason recorded on a job discarded because of its
// deadline (EnqueueParams.Deadline): it was not started by then, or its
// next attempt would have started after it. The errors recorded start
// with its text, and a handler's context that ends at the deadline has a
// cause that errors.Is it.
var ErrDeadline = errors.New("jobfence: job deadline passed")

// ErrClosed reports use of a backend or worker after it was stopped.
var ErrClosed = errors.New("jobfence: closed")

// StaleFenceError is the ErrStaleFence of one job claim.
type StaleFenceError struct {
	Lease
}

func (e *StaleFenceError) Error() string {
	return fmt.Sprintf("jobfence: job %d: fence %d is stale: the claim was lost to a newer owner; nothing was written", e.ID, e.Fence)
}

// Is makes errors.Is(err, ErrStaleFence) true.
func (e *StaleFenceError) Is(target error) bool { return target == ErrStaleFence }

// InvalidParamsError reports an EnqueueParams field that is not valid.
type InvalidParamsError struct {
	Field  string
	Reason string
	// Err, when set, is the sentinel the error wraps (ErrBadTag for
	// Tags), for errors.Is.
	Err error
}

func (e *InvalidParamsError) Error() string {
	return fmt.Sprintf("jobfence: invalid enqueue params: %s %s", e.Field, e.Reason)
}

// Unwrap returns Err.
func (e *InvalidParamsError) Unwrap() error { return e.Err }
