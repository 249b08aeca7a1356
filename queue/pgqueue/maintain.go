package pgqueue

import (
	"context"
	"fmt"
	"time"
)

// rescueSQL returns running jobs whose lease expired to retryable, backing
// off attempt^4 seconds (capped at an hour), or discards them when out of
// attempts. The expired owner's fence stays on the row, but the state is no
// longer 'running', so its late outcomes are stale.
const rescueSQL = `
WITH expired AS (
    SELECT id FROM jobfence_jobs
    WHERE state = 'running' AND lease_expires_at < now()
    ORDER BY lease_expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE jobfence_jobs j
SET state = CASE WHEN j.attempt >= j.max_attempts THEN 'discarded' ELSE 'retryable' END,
    scheduled_at = now() + least(power(j.attempt, 4), 3600) * interval '1 second',
    errors = j.errors || jsonb_build_array(jsonb_build_object(
        'attempt', j.attempt, 'at', now(),
        'error', 'lease expired: the worker stopped heartbeating (crashed, paused or cut off)')),
    finalized_at = CASE WHEN j.attempt >= j.max_attempts THEN now() END,
    lease_expires_at = NULL
FROM expired
WHERE j.id = expired.id
RETURNING j.id`

// Rescue implements queue.Maintainer. Every instance may run it; SKIP LOCKED
// keeps two rescuers off the same rows.
func (c *Client) Rescue(ctx context.Context, limit int) (int, error) {
	tag, err := c.pool.Exec(ctx, rescueSQL, limit)
	if err != nil {
		return 0, fmt.Errorf("pgqueue: rescue: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

const pruneSQL = `
DELETE FROM jobfence_jobs WHERE id IN (
    SELECT id FROM jobfence_jobs
    WHERE state IN ('completed', 'discarded', 'cancelled')
      AND finalized_at < now() - $1::bigint * interval '1 microsecond'
    ORDER BY finalized_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)`

// Prune implements queue.Maintainer: it deletes up to limit final jobs
// finalized more than retention ago. A pruned job's unique key is free
// again, so keep retention longer than any window in which the same key may
// be enqueued again (the scheduler's catch-up window is bounded by it).
func (c *Client) Prune(ctx context.Context, retention time.Duration, limit int) (int, error) {
	tag, err := c.pool.Exec(ctx, pruneSQL, retention.Microseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("pgqueue: prune: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
