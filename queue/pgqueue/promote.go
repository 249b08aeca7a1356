package pgqueue

import (
	"context"
	"fmt"
)

// promoteSQL makes up to $1 jobs whose time has come available, oldest
// first, and notifies each of their queues once. It reads them through
// jobfence_jobs_waiting (migration 00006), which holds only scheduled and
// retryable jobs by time, so a call finds the due ones without reading the
// jobs that are still waiting. SKIP LOCKED keeps concurrent promoters
// (every worker runs one) off each other's rows; a row another promoter
// moved while this one waited for it is re-checked against the WHERE
// clause under its lock and skipped, so no job is moved twice. The notify
// is in the select list, which PostgreSQL evaluates for every row it
// returns, and is sent when the statement's transaction commits.
const promoteSQL = `
WITH due AS (
    SELECT id FROM jobfence_jobs
    WHERE state IN ('scheduled', 'retryable') AND scheduled_at <= now()
    ORDER BY scheduled_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), moved AS (
    UPDATE jobfence_jobs j SET state = 'available'
    FROM due
    WHERE j.id = due.id
    RETURNING j.queue
)
SELECT queue, count(*), pg_notify($2, queue)
FROM moved
GROUP BY queue`

// Promote implements queue.Promoter: it makes up to limit scheduled and
// retryable jobs whose time has come (by the database's clock) available
// to claims, wakes the workers of their queues, and returns how many it
// made available per queue. Any number of instances may run it at once.
func (c *Client) Promote(ctx context.Context, limit int) (map[string]int, error) {
	if limit <= 0 {
		return nil, nil
	}
	rows, err := c.pool.Query(ctx, promoteSQL, limit, insertChannel)
	if err != nil {
		return nil, fmt.Errorf("pgqueue: promote due jobs: %w", err)
	}
	defer rows.Close()
	var out map[string]int
	for rows.Next() {
		var q string
		var n int
		if err := rows.Scan(&q, &n, nil); err != nil {
			return nil, fmt.Errorf("pgqueue: promote due jobs: %w", err)
		}
		if out == nil {
			out = map[string]int{}
		}
		out[q] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgqueue: promote due jobs: %w", err)
	}
	return out, nil
}
