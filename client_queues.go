package jobfence

import (
	"context"

	"github.com/jobfence/jobfence/queue/pgqueue"
)

// QueueInfo describes one queue for operators: whether it is paused, by
// whom, and its jobs counted by state up to a cap. See pgqueue.QueueInfo.
type QueueInfo = pgqueue.QueueInfo

// ErrNoQueueName reports a queue method given an empty queue name.
var ErrNoQueueName = pgqueue.ErrNoQueueName

// Queues returns the handle on the fleet's queues: list them, pause and
// resume them for every instance. Every client has it, insert-only
// included.
func (c *Client) Queues() Queues { return Queues{c: c} }

// Queues lists, pauses and resumes the fleet's queues through a Client
// (Client.Queues); the methods pass to the pgqueue.Client's.
type Queues struct{ c *Client }

// List returns the queues that have jobs, or were paused once, by name,
// with their bounded counts. See pgqueue.Client.Queues.
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
