package pgqueue

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jobfence/jobfence/queue"
)

// Bounds of one aging pass (ageSQL): the queues it looks at, from where
// the last pass stopped, and the jobs a queue and priority it ages.
const (
	agingQueues = 32
	agingBatch  = 32
)

// ageSQL improves by one level (priority - 1) the priority of available
// jobs that have waited Config.PriorityAging ($1, in microseconds) at
// theirs: up to agingBatch of each priority below the first of each of up
// to $3 queues that have available jobs, from the first queue after $2,
// each the oldest of its priority, and moves each job's scheduled_at on by
// PriorityAging, so that it ages one level a PriorityAging it waits (and
// keeps its age's place among the jobs of its new priority: it is still
// one PriorityAging less old than it is). The claim's order (priority,
// scheduled_at, id) and its index are unchanged: aging is a write the
// promoter pass makes, not a term of the claim. It reads the claim's
// index (jobfence_jobs_available): a loose scan of its queues, one entry
// each, then the oldest jobs of each queue and priority; rows another
// statement holds (a claim taking them) are skipped. It replies with the
// jobs it aged and the last queue it looked at.
//
// transition: age
var ageSQL = `
WITH RECURSIVE q(name, i) AS (
    (SELECT queue, 1 FROM jobfence_jobs WHERE state = 'available' AND queue > $2 ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT x.queue, q.i + 1 FROM q CROSS JOIN LATERAL (
        SELECT queue FROM jobfence_jobs WHERE state = 'available' AND queue > q.name ORDER BY queue LIMIT 1) x
    WHERE q.i < $3
), c AS MATERIALIZED (
    SELECT x.id FROM q CROSS JOIN generate_series(` + strconv.Itoa(queue.MinPriority+1) + `, ` + strconv.Itoa(queue.MaxPriority) + `) AS p(p) CROSS JOIN LATERAL (
        SELECT id FROM jobfence_jobs
        WHERE state = 'available' AND queue = q.name AND priority = p.p
          AND scheduled_at <= now() - $1::bigint * interval '1 microsecond'
        ORDER BY queue, priority, scheduled_at, id
        LIMIT ` + strconv.Itoa(agingBatch) + `
        FOR UPDATE SKIP LOCKED) x
), u AS (
    UPDATE jobfence_jobs j
    SET priority = j.priority - 1, scheduled_at = j.scheduled_at + $1::bigint * interval '1 microsecond'
    FROM c
    WHERE j.id = ANY (ARRAY(SELECT id FROM c)) AND j.id = c.id
    RETURNING j.id
)
SELECT (SELECT count(*) FROM u)::int, (SELECT name FROM q ORDER BY i DESC LIMIT 1), (SELECT count(*) FROM q)::int`

// agePriorities runs ageSQL once, from this client's aging cursor, and
// returns how many jobs it aged. Promote calls it when
// Config.PriorityAging is set.
func (c *Client) agePriorities(ctx context.Context) (int, error) {
	c.ageCursor.Lock()
	from := c.ageCursor.queue
	c.ageCursor.Unlock()
	var n, queues int
	var last *string
	if err := c.pool.QueryRow(ctx, ageSQL, c.cfg.PriorityAging.Microseconds(), from, agingQueues).Scan(&n, &last, &queues); err != nil {
		return 0, fmt.Errorf("pgqueue: age priorities: %w", err)
	}
	next := ""
	if queues == agingQueues && last != nil {
		next = *last
	}
	c.ageCursor.Lock()
	c.ageCursor.queue = next
	c.ageCursor.Unlock()
	return n, nil
}
