package queue

import (
	"context"
	"errors"
	"fmt"
)

// MaxConcurrency is the most jobs of one queue that a run-time change may
// let one worker run at once (a worker's Add, Set and a stored fleet
// setting): a larger number is far more likely a typo than a plan, and
// each slot is a goroutine. A worker's configuration is not bounded by it.
const MaxConcurrency = 10_000

// ErrNoQueueName reports a queue operation given an empty queue name.
var ErrNoQueueName = errors.New("jobfence: a queue name is required")

// ErrBadConcurrency reports a queue's concurrency below 1 or above
// MaxConcurrency in a run-time change.
var ErrBadConcurrency = errors.New("jobfence: bad queue concurrency")

// CheckQueue checks a run-time change of queue name to concurrency n:
// an empty name wraps ErrNoQueueName, and n outside 1..MaxConcurrency
// wraps ErrBadConcurrency with a message that names the range.
func CheckQueue(name string, n int) error {
	if name == "" {
		return ErrNoQueueName
	}
	if n < 1 || n > MaxConcurrency {
		return fmt.Errorf("%w: queue %q: concurrency %d is out of range: it must be between 1 and %d", ErrBadConcurrency, name, n, MaxConcurrency)
	}
	return nil
}

// QueueRun says which workers work a queue, as stored for the fleet.
type QueueRun string

const (
	// RunConfigured (no stored choice): the workers whose configuration
	// names the queue, or that added it locally, work it.
	RunConfigured QueueRun = ""
	// RunStarted: besides those, every worker that opted in to fleet
	// queues (worker.Config.FleetQueues) works it, at the stored
	// concurrency.
	RunStarted QueueRun = "started"
	// RunStopped: no worker works it; each drains its running jobs.
	RunStopped QueueRun = "stopped"
)

// QueueSetting is what is stored for one queue for the whole fleet: its
// pause, its concurrency and which workers work it.
type QueueSetting struct {
	// Name is the queue's name.
	Name string
	// Paused reports that no worker claims its jobs.
	Paused bool
	// Concurrency, when positive, replaces the concurrency that each
	// worker working the queue has for it from its configuration; zero
	// leaves each worker's own.
	Concurrency int
	// Run says which workers work it; RunStarted always comes with a
	// Concurrency.
	Run QueueRun
}

// QueueWatcher is implemented by backends that store queue settings for
// the fleet (pgqueue). A worker on such a backend follows them: it stops
// claiming from paused queues, sizes its queues as stored, starts and
// stops them as Run says (see worker.Config.FleetQueues). It is used in
// place of PauseWatcher where a backend has both.
type QueueWatcher interface {
	// WatchQueues returns a channel that receives the settings of every
	// queue that has any (paused, a stored concurrency or a Run), by
	// name: once as soon as they are known, and again whenever they may
	// have changed. Each value is the whole set, so a receiver that
	// missed one loses nothing by reading the next. The channel is valid
	// until ctx ends.
	WatchQueues(ctx context.Context) (<-chan []QueueSetting, error)
}
