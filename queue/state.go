package queue

import (
	"errors"
	"fmt"
	"strings"
)

// State is where a job is in its life.
type State string

// The states of a job. Available, scheduled and retryable jobs are waiting;
// the worker picks them up once their scheduled time has come. A limited
// job waits for a slot of the limit that governs it (see pgqueue's
// SetLimit), which makes it available. A pending job is a workflow task
// waiting for its dependencies (package workflow): the completion of its
// last dependency makes it available. Completed, discarded and cancelled
// are final.
const (
	StateAvailable State = "available"
	StateScheduled State = "scheduled"
	StateLimited   State = "limited"
	StateRunning   State = "running"
	StateRetryable State = "retryable"
	StateCompleted State = "completed"
	StateDiscarded State = "discarded"
	StateCancelled State = "cancelled"
	// StatePending is a workflow task waiting for its dependencies: no
	// claim reads it until the completion of its last dependency makes it
	// available.
	StatePending State = "pending"
)

// Final reports whether s is a final state.
func (s State) Final() bool {
	return s == StateCompleted || s == StateDiscarded || s == StateCancelled
}

// ErrUnknownState reports a name that is not one of the states.
var ErrUnknownState = errors.New("jobfence: unknown job state")

// States returns every state, in the order a job passes through them,
// but for limited and pending, which came later and are last.
func States() []State {
	return []State{StateAvailable, StateScheduled, StateRunning, StateRetryable, StateCompleted, StateDiscarded, StateCancelled, StateLimited, StatePending}
}

// ParseState returns the state named s, or an error wrapping
// ErrUnknownState that lists the states, for input from users.
func ParseState(s string) (State, error) {
	names := make([]string, 0, len(States()))
	for _, st := range States() {
		if string(st) == s {
			return st, nil
		}
		names = append(names, string(st))
	}
	return "", fmt.Errorf("%w %q: want one of %s", ErrUnknownState, s, strings.Join(names, ", "))
}
