package pgqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// pauseChannel carries pause and resume notifications; the payload is the
// queue's name. A worker that hears one re-reads the paused set rather
// than trust the payload, so a notification from another schema of the same
// database (NOTIFY is per database) costs one small query and changes
// nothing.
const pauseChannel = "jobfence_pause"

// ErrNoQueueName reports a queue operation without a queue name: it is
// queue.ErrNoQueueName.
var ErrNoQueueName = queue.ErrNoQueueName

// pauseSQL marks queue $1 paused by $2 unless it already is (then its first
// pauser stays on record), and tells every worker in the same statement:
// the notification is delivered when, and only if, the change commits.
const pauseSQL = `
WITH up AS (
    INSERT INTO jobfence_queues AS q (name, paused_at, paused_by, updated_at, updated_by)
    VALUES ($1, now(), $2, now(), $2)
    ON CONFLICT (name) DO UPDATE SET paused_at = now(), paused_by = $2, updated_at = now(), updated_by = $2
    WHERE q.paused_at IS NULL
    RETURNING 1
)
SELECT pg_notify('` + pauseChannel + `', $1), (SELECT count(*) FROM up)`

// resumeSQL clears the pause of queue $1. A queue without a row was never
// paused, and resuming it writes nothing.
const resumeSQL = `
WITH up AS (
    UPDATE jobfence_queues SET paused_at = NULL, paused_by = NULL, updated_at = now(), updated_by = $2
    WHERE name = $1 AND paused_at IS NOT NULL
    RETURNING 1
)
SELECT pg_notify('` + pauseChannel + `', $1), (SELECT count(*) FROM up)`

// PauseQueue stops every worker of the fleet from claiming jobs of the
// queue within about a second (see Client.WatchPaused); jobs already
// running finish normally, and jobs can still be enqueued. by says who
// paused it (a user, a host) for `jobfence queues list` and the dashboard.
// Pausing a paused queue changes nothing; pausing a queue that has no jobs
// yet pauses it for the jobs to come.
func (c *Client) PauseQueue(ctx context.Context, q, by string) error {
	return c.setPaused(ctx, "pause", pauseSQL, q, by)
}

// ResumeQueue lets workers claim jobs of the queue again; by says who
// resumed it. Resuming a queue that is not paused changes nothing.
func (c *Client) ResumeQueue(ctx context.Context, q, by string) error {
	return c.setPaused(ctx, "resume", resumeSQL, q, by)
}

func (c *Client) setPaused(ctx context.Context, verb, sql, q, by string) error {
	if q == "" {
		return fmt.Errorf("pgqueue: %s queue: %w", verb, ErrNoQueueName)
	}
	var changed int64
	if err := c.pool.QueryRow(ctx, sql, q, by).Scan(nil, &changed); err != nil {
		return fmt.Errorf("pgqueue: %s queue %q: %w", verb, q, err)
	}
	if changed > 0 {
		c.cfg.Logger.Info("jobfence: queue "+verb+"d", "queue", q, "by", by)
	}
	return nil
}

// QueueInfo describes one queue for operators.
type QueueInfo struct {
	// Name is the queue's name.
	Name string
	// Paused reports whether workers are kept from claiming its jobs.
	Paused bool
	// PausedAt and PausedBy say when and by whom it was paused; zero when
	// it runs.
	PausedAt time.Time
	PausedBy string
	// UpdatedAt and UpdatedBy say when and by whom it was last paused,
	// resumed or set for the fleet (SetQueueConcurrency, StartQueue,
	// StopQueue, ResetQueue); zero for a queue that never was.
	UpdatedAt time.Time
	UpdatedBy string
	// Concurrency is its concurrency stored for the fleet, which every
	// worker working it follows; zero: each worker's own.
	Concurrency int
	// Run says which workers work it, as stored for the fleet: those
	// configured for it (queue.RunConfigured), those too that opted in
	// to fleet queues (queue.RunStarted), or none (queue.RunStopped).
	Run queue.QueueRun
	// Counts holds how many of its jobs are in each state, counted up to
	// Config.CountCap; a state absent has none. A count is a lower bound
	// (Count.AtLeast) where counting stopped: at the cap for a queue's
	// available and discarded jobs, and for the other states once the
	// state holds more than the cap over all queues (then a queue's count
	// is its share of the first CountCap by due time for scheduled and
	// retryable, by finish time, newest first, for completed and
	// cancelled, by limit for limited, and may be "?" for a queue not
	// among them). Pending jobs (workflow tasks waiting for their
	// dependencies) are counted among the tasks of the CountCap newest
	// workflows, up to CountCap tasks: exact while there are at most
	// CountCap workflows and their tasks fit, lower bounds otherwise.
	Counts map[queue.State]Count
	// Completed5m and Completed1h count its jobs completed in the last
	// five minutes and the last hour, exactly while the CountCap newest
	// finished jobs reach back that far, lower bounds otherwise.
	Completed5m, Completed1h Count
	// OldestAvailable is when the longest-waiting of its ready jobs
	// (available, or scheduled or retryable and due) became ready; zero if
	// none is waiting. It is exact unless more than CountCap scheduled and
	// retryable jobs are due and not yet available.
	OldestAvailable time.Time
}

// Count is how many of the queue's jobs are in state s: the zero Count
// (none) for a state absent from Counts.
func (q QueueInfo) Count(s queue.State) Count { return q.Counts[s] }

// deref returns *p, or the zero value for nil: NULL columns become zero
// fields.
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}
