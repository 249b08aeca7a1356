package pgqueue

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jobfence/jobfence/queue"
)

// ErrUnknownQueue reports StopQueue of a queue that no live worker works
// and that has no stored row (never paused or set): most likely a
// misspelt name.
var ErrUnknownQueue = errors.New("jobfence: unknown queue: no worker works it and nothing is stored for it")

// The statements below change a queue's stored settings and tell every
// worker in the same statement, as pauseSQL does: the notification on
// pauseChannel is delivered when, and only if, the change commits, and a
// worker that hears it re-reads the settings (WatchQueues).

// setConcurrencySQL stores concurrency $2 for queue $1, by $3.
const setConcurrencySQL = `
WITH up AS (
    INSERT INTO jobfence_queues AS q (name, concurrency, updated_at, updated_by)
    VALUES ($1, $2, now(), $3)
    ON CONFLICT (name) DO UPDATE SET concurrency = $2, updated_at = now(), updated_by = $3
    RETURNING 1
)
SELECT pg_notify('` + pauseChannel + `', $1), (SELECT count(*) FROM up)`

// startQueueSQL stores concurrency $2 for queue $1 and starts it in the
// workers that opted in, by $3.
const startQueueSQL = `
WITH up AS (
    INSERT INTO jobfence_queues AS q (name, concurrency, run_state, updated_at, updated_by)
    VALUES ($1, $2, 'started', now(), $3)
    ON CONFLICT (name) DO UPDATE SET concurrency = $2, run_state = 'started', updated_at = now(), updated_by = $3
    RETURNING 1
)
SELECT pg_notify('` + pauseChannel + `', $1), (SELECT count(*) FROM up)`

// stopQueueSQL stops queue $1 in every worker, by $2, if the queue is
// known: it has a row, or a live worker works it.
const stopQueueSQL = `
WITH known AS (
    SELECT EXISTS (SELECT FROM jobfence_queues WHERE name = $1)
        OR EXISTS (SELECT FROM jobfence_workers WHERE $1 = ANY (queues)) AS k
), up AS (
    INSERT INTO jobfence_queues AS q (name, run_state, updated_at, updated_by)
    SELECT $1, 'stopped', now(), $2 FROM known WHERE k
    ON CONFLICT (name) DO UPDATE SET run_state = 'stopped', updated_at = now(), updated_by = $2
    RETURNING 1
)
SELECT pg_notify('` + pauseChannel + `', $1), k, (SELECT count(*) FROM up) FROM known`

// resetQueueSQL clears queue $1's stored concurrency and run state, by
// $2; its pause stays as it is.
const resetQueueSQL = `
WITH up AS (
    UPDATE jobfence_queues SET concurrency = NULL, run_state = NULL, updated_at = now(), updated_by = $2
    WHERE name = $1 AND (concurrency IS NOT NULL OR run_state IS NOT NULL)
    RETURNING 1
)
SELECT pg_notify('` + pauseChannel + `', $1), (SELECT count(*) FROM up)`

// queueSettingsSQL reads every queue's stored settings, for WatchQueues:
// a row per queue ever paused or set, so a small table.
const queueSettingsSQL = `
SELECT name, paused_at IS NOT NULL, coalesce(concurrency, 0), coalesce(run_state, '')
FROM jobfence_queues
WHERE paused_at IS NOT NULL OR concurrency IS NOT NULL OR run_state IS NOT NULL
ORDER BY name`

// SetQueueConcurrency stores concurrency n for queue q: every worker of
// the fleet that works q runs up to n of its jobs at once, in place of
// its configured concurrency, within about a second (WatchQueues).
// Shrinking cancels no running job. by says who did it, for `jobfence
// queues list` and the dashboard. An empty name wraps ErrNoQueueName; n
// outside 1..queue.MaxConcurrency wraps queue.ErrBadConcurrency.
func (c *Client) SetQueueConcurrency(ctx context.Context, q string, n int, by string) error {
	if err := queue.CheckQueue(q, n); err != nil {
		return fmt.Errorf("pgqueue: set queue concurrency: %w", err)
	}
	return c.storeQueue(ctx, "set", setConcurrencySQL, q, by, n)
}

// StartQueue stores concurrency n for queue q, as SetQueueConcurrency
// does, and starts q in every worker that opted in to fleet queues
// (worker.Config.FleetQueues) and does not work it yet. Its errors are
// SetQueueConcurrency's.
func (c *Client) StartQueue(ctx context.Context, q string, n int, by string) error {
	if err := queue.CheckQueue(q, n); err != nil {
		return fmt.Errorf("pgqueue: start queue: %w", err)
	}
	return c.storeQueue(ctx, "start", startQueueSQL, q, by, n)
}

// StopQueue stops queue q in every worker of the fleet within about a
// second, configured for it or not: each claims none of its jobs and lets
// the running ones finish. Inserts go on; the jobs wait for StartQueue or
// ResetQueue. A queue that no live worker works and that has no stored
// row wraps ErrUnknownQueue (most likely a misspelt name); an empty name
// wraps ErrNoQueueName.
func (c *Client) StopQueue(ctx context.Context, q, by string) error {
	if q == "" {
		return fmt.Errorf("pgqueue: stop queue: %w", ErrNoQueueName)
	}
	var known bool
	var changed int64
	if err := c.pool.QueryRow(ctx, stopQueueSQL, q, by).Scan(nil, &known, &changed); err != nil {
		return fmt.Errorf("pgqueue: stop queue %q: %w", q, err)
	}
	if !known {
		return fmt.Errorf("pgqueue: stop queue %q: %w", q, ErrUnknownQueue)
	}
	c.cfg.Logger.Info("jobfence: queue stopped for the fleet", "queue", q, "by", by)
	return nil
}

// ResetQueue clears queue q's stored concurrency and run state: every
// worker goes back to its own configuration of q (and its local calls)
// within about a second. A pause stays. Resetting a queue with nothing
// stored changes nothing. An empty name wraps ErrNoQueueName.
func (c *Client) ResetQueue(ctx context.Context, q, by string) error {
	if q == "" {
		return fmt.Errorf("pgqueue: reset queue: %w", ErrNoQueueName)
	}
	return c.storeQueue(ctx, "reset", resetQueueSQL, q, by, 0)
}

// storeQueue runs one of the statements above for queue q: with $2 the
// concurrency n and $3 by, or, for n 0, $2 by.
func (c *Client) storeQueue(ctx context.Context, verb, sql, q, by string, n int) error {
	params := []any{q, by}
	if n > 0 {
		params = []any{q, n, by}
	}
	var changed int64
	if err := c.pool.QueryRow(ctx, sql, params...).Scan(nil, &changed); err != nil {
		return fmt.Errorf("pgqueue: %s queue %q: %w", verb, q, err)
	}
	if changed > 0 {
		c.cfg.Logger.Info("jobfence: queue "+verb+" for the fleet", "queue", q, "by", by, "concurrency", n)
	}
	return nil
}

// QueueSettings returns every queue's stored settings, by name: those
// paused, or with a stored concurrency or run state.
func (c *Client) QueueSettings(ctx context.Context) ([]queue.QueueSetting, error) {
	rows, err := c.pool.Query(ctx, queueSettingsSQL)
	if err != nil {
		return nil, fmt.Errorf("pgqueue: queue settings: %w", err)
	}
	defer rows.Close()
	var out []queue.QueueSetting
	for rows.Next() {
		var s queue.QueueSetting
		var run string
		if err := rows.Scan(&s.Name, &s.Paused, &s.Concurrency, &run); err != nil {
			return nil, fmt.Errorf("pgqueue: queue settings: %w", err)
		}
		s.Run = queue.QueueRun(run)
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgqueue: queue settings: %w", err)
	}
	return out, nil
}

// WatchQueues implements queue.QueueWatcher as WatchPaused watches the
// paused set, for every queue: it reads the settings before it returns
// (within a few seconds), then again when a change of any queue is
// notified (PauseQueue, ResumeQueue, SetQueueConcurrency, StartQueue,
// StopQueue, ResetQueue), when the LISTEN is back after a loss, and at
// least every 30 PausePollIntervals; without LISTEN (Config.PollOnly, or
// while the connection is down) every PausePollInterval. A worker so
// picks a change up within about a second, and never waits on a lock
// for it: the read is one small query.
func (c *Client) WatchQueues(ctx context.Context) (<-chan []queue.QueueSetting, error) {
	return watchStored(ctx, c, "the stored queue settings",
		func(string) bool { return true },
		c.QueueSettings,
		slices.Equal[[]queue.QueueSetting]), nil
}
