package queue

// State is where a job is in its life.
type State string

// The states of a job. Available, scheduled and retryable jobs are waiting;
// the worker picks them up once their scheduled time has come. Completed,
// discarded and cancelled are final.
const (
	StateAvailable State = "available"
	StateScheduled State = "scheduled"
	StateRunning   State = "running"
	StateRetryable State = "retryable"
	StateCompleted State = "completed"
	StateDiscarded State = "discarded"
	StateCancelled State = "cancelled"
)

// Final reports whether s is a final state.
func (s State) Final() bool {
	return s == StateCompleted || s == StateDiscarded || s == StateCancelled
}
