package idempotency

import (
	"errors"
	"fmt"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// ErrStaleFence reports a write made under a fence that is no longer the
// current one: a newer owner took the key, job or result over, and the write
// changed nothing. It is the same value as queue.ErrStaleFence, so one
// errors.Is test covers jobs, keys and results.
var ErrStaleFence = queue.ErrStaleFence

// ErrKeyReused reports an idempotency key used again with a different
// fingerprint: the same key was sent for a different request. The operation
// was not run.
var ErrKeyReused = errors.New("jobfence: idempotency key reused with a different request fingerprint")

// ErrInProgress reports an idempotency key that another caller holds and is
// still running. The operation was not run; retry later, or set
// Options.WaitForInProgress to wait for the first caller's response.
var ErrInProgress = errors.New("jobfence: idempotency key in progress")

// ErrInvalidKey reports an idempotency or result key (or a fingerprint or
// scope) that cannot be stored: empty, longer than MaxKeyLen bytes, or not
// valid UTF-8 text.
var ErrInvalidKey = errors.New("jobfence: invalid key")

// ErrResultNotFound reports a result key with no stored result.
var ErrResultNotFound = errors.New("jobfence: result not found")

// KeyReusedError is the ErrKeyReused of one key.
type KeyReusedError struct {
	Scope string
	Key   string
}

// Error describes the error for people.
func (e *KeyReusedError) Error() string {
	return fmt.Sprintf("jobfence: idempotency key %q (scope %q) reused with a different request fingerprint; the operation was not run", e.Key, e.Scope)
}

// Is makes errors.Is(err, ErrKeyReused) true.
func (e *KeyReusedError) Is(target error) bool { return target == ErrKeyReused }

// InProgressError is the ErrInProgress of one key.
type InProgressError struct {
	Scope string
	Key   string
	// LeaseExpiresAt is when the current holder's lease runs out unless it
	// extends it; a retry after that may take the key over.
	LeaseExpiresAt time.Time
}

// Error describes the error for people.
func (e *InProgressError) Error() string {
	return fmt.Sprintf("jobfence: idempotency key %q (scope %q) is in progress under another caller (lease until %s); the operation was not run",
		e.Key, e.Scope, e.LeaseExpiresAt.UTC().Format(time.RFC3339Nano))
}

// Is makes errors.Is(err, ErrInProgress) true.
func (e *InProgressError) Is(target error) bool { return target == ErrInProgress }

// StaleFenceError is the ErrStaleFence of one key and fence: the write under
// Fence changed nothing because a newer owner holds, or has written, Key.
type StaleFenceError struct {
	Scope string
	Key   string
	Fence int64
}

// Error describes the error for people.
func (e *StaleFenceError) Error() string {
	return fmt.Sprintf("jobfence: key %q (scope %q): fence %d is stale: the claim was lost to a newer owner; nothing was written", e.Key, e.Scope, e.Fence)
}

// Is makes errors.Is(err, ErrStaleFence) true.
func (e *StaleFenceError) Is(target error) bool { return target == ErrStaleFence }
