package jobfence

import (
	"context"
	"errors"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// QueueInfo describes one queue for operators: whether it is paused, by
// whom, its stored fleet settings, and its jobs counted by state up to a
// cap. See pgqueue.QueueInfo.
type QueueInfo = pgqueue.QueueInfo

// Errors of the queue methods; test for them with errors.Is.
var (
	// ErrNoQueueName reports a queue method given an empty queue name.
	ErrNoQueueName = pgqueue.ErrNoQueueName
	// ErrBadConcurrency reports a concurrency below 1 or above
	// queue.MaxConcurrency given to Add, Set, FleetAdd or FleetSet.
	ErrBadConcurrency = queue.ErrBadConcurrency
	// ErrQueueWorked reports Add of a queue this client works already.
	ErrQueueWorked = worker.ErrQueueWorked
	// ErrQueueNotWorked reports Set or Remove of a queue this client does
	// not work.
	ErrQueueNotWorked = worker.ErrQueueNotWorked
	// ErrUnknownQueue reports FleetRemove of a queue that no live worker
	// works and that nothing is stored for: most likely a misspelt name.
	ErrUnknownQueue = pgqueue.ErrUnknownQueue
	// ErrNoWorker reports Add, Set or Remove on an insert-only client: it
	// has no worker whose queues to change.
	ErrNoWorker = errors.New("jobfence: client has no worker (no Config.Queues): it works no queue")
)

// Queues returns the handle on the queues: this client's own (Add, Set,
// Remove, Worked) and the fleet's (List, Pause, Resume, and the Fleet
// methods, stored in the database for every instance). Every client has
// it, insert-only included (the fleet's methods only).
func (c *Client) Queues() Queues { return Queues{c: c} }

// Queues changes the queues this client works, and the fleet's, through
// a Client (Client.Queues). The methods with a by argument act on the
// whole fleet through the database, within about a second; Add, Set and
// Remove act on this process alone, at once. See docs/operations.md,
// "Resizing, adding and removing queues".
type Queues struct{ c *Client }

// List returns the queues that have jobs, or were paused or set once, by
// name, with their bounded counts. See pgqueue.Client.Queues.
func (q Queues) List(ctx context.Context) ([]QueueInfo, error) {
	return q.c.pg.Queues(ctx)
}

// Pause stops every worker of the fleet from claiming jobs of queue name
// within about a second; running jobs finish, and inserts go on. by says
// who paused it (a user, a host), for `jobfence queues list` and the
// dashboard. Pausing a paused queue changes nothing; pausing a queue with
// no jobs yet pauses it for those to come. The pause lasts across
// restarts, until Resume. An empty name wraps ErrNoQueueName.
func (q Queues) Pause(ctx context.Context, name, by string) error {
	return q.c.pg.PauseQueue(ctx, name, by)
}

// Resume lets the fleet's workers claim jobs of queue name again; by says
// who resumed it. Resuming a queue that is not paused changes nothing. An
// empty name wraps ErrNoQueueName.
func (q Queues) Resume(ctx context.Context, name, by string) error {
	return q.c.pg.ResumeQueue(ctx, name, by)
}

// Add starts working queue name with concurrency slots in this client
// alone: at once if it runs, else from Start (and after a restart by
// Stop and Start). The handlers of its jobs' kinds must be registered: a
// job of a kind without one goes back to the queue without spending an
// attempt, for an instance that knows the kind. A queue the client works
// already is refused (ErrQueueWorked: use Set), as are an empty name
// (ErrNoQueueName), a concurrency outside 1..queue.MaxConcurrency
// (ErrBadConcurrency) and an insert-only client (ErrNoWorker).
//
// Add, Set and Remove override the queue's fleet setting (FleetSet,
// FleetAdd, FleetRemove) in this process until that setting next
// changes; a new process follows the stored setting.
func (q Queues) Add(name string, concurrency int) error {
	return q.c.changeQueue(func(w *worker.Worker) error { return w.AddQueue(name, concurrency) },
		func(m map[string]int) { m[name] = concurrency })
}

// Set changes the concurrency of queue name, which this client works, in
// this client alone. Growing claims more at once; shrinking cancels no
// running job, it stops claims until fewer than concurrency of the
// queue's jobs run. A queue the client does not work is refused
// (ErrQueueNotWorked: use Add), as are Add's bad inputs.
func (q Queues) Set(name string, concurrency int) error {
	return q.c.changeQueue(func(w *worker.Worker) error { return w.SetQueue(name, concurrency) },
		func(m map[string]int) { m[name] = concurrency })
}

// Remove stops working queue name in this client alone and drains it: no
// job of it is claimed from now on, the running ones finish (each within
// its timeout), and the queue leaves this worker's entry in `jobfence
// workers list`. It returns once they have ended, or with an error
// wrapping ctx's cause when ctx ends first (the drain goes on; nothing
// more is claimed). Jobs of the queue wait for the instances that still
// work it. A queue the client does not work is refused
// (ErrQueueNotWorked), as are an empty name and an insert-only client.
func (q Queues) Remove(ctx context.Context, name string) error {
	return q.c.changeQueue(func(w *worker.Worker) error { return w.RemoveQueue(ctx, name) },
		func(m map[string]int) { delete(m, name) })
}

// Worked returns the queues this client works (or will from Start), with
// their concurrency: Config.Queues as Add, Set, Remove and the fleet's
// stored settings changed them; nil for an insert-only client.
func (q Queues) Worked() map[string]int {
	w := q.c.Worker()
	if w == nil {
		return nil
	}
	return w.Queues()
}

// FleetSet stores concurrency n for queue name: every instance that
// works the queue runs up to n of its jobs at once, in place of its
// configured number, within about a second, until FleetReset. Shrinking
// cancels no running job. by says who did it. Bad inputs are refused as
// Add refuses them.
func (q Queues) FleetSet(ctx context.Context, name string, n int, by string) error {
	return q.c.pg.SetQueueConcurrency(ctx, name, n, by)
}

// FleetAdd stores concurrency n for queue name, as FleetSet does, and
// starts the queue in every instance that opted in to fleet queues
// (worker.Config.FleetQueues), besides those configured for it. Bad
// inputs are refused as Add refuses them.
func (q Queues) FleetAdd(ctx context.Context, name string, n int, by string) error {
	return q.c.pg.StartQueue(ctx, name, n, by)
}

// FleetRemove stops queue name in every instance within about a second,
// configured for it or not: each claims none of its jobs and drains the
// running ones. Inserts go on; its jobs wait for FleetAdd or FleetReset.
// A queue no live worker works and nothing is stored for wraps
// ErrUnknownQueue; an empty name, ErrNoQueueName.
func (q Queues) FleetRemove(ctx context.Context, name, by string) error {
	return q.c.pg.StopQueue(ctx, name, by)
}

// FleetReset clears queue name's stored concurrency and run state (not
// its pause): every instance goes back to its own configuration of the
// queue within about a second. An empty name wraps ErrNoQueueName.
func (q Queues) FleetReset(ctx context.Context, name, by string) error {
	return q.c.pg.ResetQueue(ctx, name, by)
}

// changeQueue applies a local queue change to the client's worker, and,
// once it is accepted, to the configuration that a Start after Stop
// builds the next worker from.
func (c *Client) changeQueue(apply func(*worker.Worker) error, record func(map[string]int)) error {
	if !c.works {
		return ErrNoWorker
	}
	c.mu.Lock()
	w := c.w
	c.mu.Unlock()
	if err := apply(w); err != nil {
		return err
	}
	c.mu.Lock()
	record(c.wcfg.Queues)
	c.mu.Unlock()
	return nil
}
