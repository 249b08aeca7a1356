package pgqueue

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// promoteSQL makes up to $1 jobs whose time has come available, oldest
// first, and replies with a row per queue and how many. It reads them through
// jobfence_jobs_waiting (migration 00006), which holds only scheduled and
// retryable jobs by time, so a call finds the due ones without reading the
// jobs that are still waiting. SKIP LOCKED keeps concurrent promoters
// (every worker runs one) off each other's rows; a row another promoter
// moved while this one waited for it is re-checked against the WHERE
// clause under its lock and skipped, so no job is moved twice. Promote
// wakes the queues' workers once the statement has committed (wakeReady):
// a NOTIFY in the statement would make its commit wait its turn behind
// every other notifying commit.
//
// The same statement discards up to $1 jobs not started by their deadline
// (EnqueueParams.Deadline): its deadline passed while it waited, whatever
// it waited for (deadlineStatesSQL): its time (scheduled, retryable), a claim
// (available), a limit's slot (limited) or its workflow dependencies
// (pending). A limited or pending job holds no limit slot, rate slot or
// sequence turn, so its discard frees none; the grants pass over it in
// the meantime (oldestWaitingSQL). It reads them through
// jobfence_jobs_deadline_waiting (migration 00023), which holds only such
// jobs that have a deadline, so with none it costs an index probe. A
// promoter runs every worker.Config.PromoteInterval (1 s by default) on
// every worker, so such a job is discarded about that long after its
// deadline while any worker runs, whatever its queue (a paused one, or
// one no worker takes, included), 1,000 a worker a call at most. That
// sweep is only what the job's state shows: no job starts after its
// deadline anyway, as a worker that claims one (a claim's, a hand-over's
// or a release's) discards it unrun (its claim, by the database's clock,
// is past the deadline), no grant hands it a slot, and a retry or snooze
// past the deadline discards its job (finishSQL, rescueSQL). A due job
// whose deadline has passed is left to the discard, never promoted. A
// workflow task with dependents is left to lateTasksSQL, whose
// transaction also cancels or releases its dependents: the last row says
// whether there are such tasks.
//
// A due job is Ready (readySQL, the state machine's row "promote"):
// available, or limited where a limit governs it, its slot given up even
// where its limit held it through the wait (FailureHold, a sequence), so
// that it starts again only through a grant: a grant takes a rate slot
// for the new start, counts a lowered limit, and hands a sequence's turn
// to its oldest job, which this one is. Made available with the slot it
// kept, a retry started again without a rate slot, and past a limit
// lowered meanwhile (TestPromotedRetryTakesARateSlot,
// TestPromotedRetriesKeepALoweredLimit). The worker's grant pass follows
// each promotion. A due job that no limit governed when it was inserted,
// of a queue (and kind) that has a limit now, comes under it (adopt: a
// probe of the limits' (queue, kind) index, as an insert's), as SetLimit
// brings available jobs under it.
//
// A job suspended awaiting a signal (finishSQL's await) that has an
// undelivered signal of that name is Ready too, before its timer
// (signalled, the state machine's row "signal"): the sweep that wakes a
// wait whose signal was stored while it suspended (a Signal's own pass
// found it still running), or in a caller's transaction (SignalTx). It
// reads the undelivered signals' partial index (migration 00027): with
// none, one probe.
//
// transition: promote, deadline, signal
var promoteSQL = `
WITH due AS (
    SELECT id FROM jobfence_jobs
    WHERE state IN ('scheduled', 'retryable') AND scheduled_at <= now()
      AND NOT coalesce(deadline < now(), false)
    ORDER BY scheduled_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), signalled AS (
    SELECT j.id FROM jobfence_signals g JOIN jobfence_jobs j ON j.id = g.job_id
    WHERE g.delivered_at IS NULL AND j.state = 'scheduled' AND j.awaiting = g.name
      AND NOT coalesce(j.deadline < now(), false)
    LIMIT $1
    FOR UPDATE OF j SKIP LOCKED
), keep AS MATERIALIZED (
    SELECT due.id, adopt.name AS adopt_name, adopt.part AS adopt_part, adopt.fair AS adopt_fair
    FROM (SELECT id FROM due UNION SELECT id FROM signalled) due JOIN jobfence_jobs j ON j.id = due.id
    ` + adoptLateralSQL + `true` + adoptLateralEndSQL + `
), moved AS (
    UPDATE jobfence_jobs j
    SET state = ` + readySQL("coalesce(j.limit_name, keep.adopt_name)") + `,
        limit_slot = NULL,
        limit_name = coalesce(j.limit_name, keep.adopt_name),
        limit_part = coalesce(j.limit_part, keep.adopt_part),
        limit_fair = CASE WHEN j.limit_name IS NULL THEN keep.adopt_fair ELSE j.limit_fair END,
        scheduled_at = least(j.scheduled_at, now()),
        awaiting = NULL
    FROM keep
    WHERE j.id = keep.id
    RETURNING j.queue, j.state
), late AS (
    SELECT id FROM jobfence_jobs
    WHERE deadline < now() AND deadline IS NOT NULL AND state IN ` + deadlineStatesSQL() + `
      AND dependents IS NULL
    ORDER BY deadline
    LIMIT $1
    FOR UPDATE SKIP LOCKED
), dropped AS (
    UPDATE jobfence_jobs j
    SET ` + lateSet + `
    FROM late
    WHERE j.id = late.id
)
SELECT queue, count(*), false
FROM moved
WHERE state = 'available'
GROUP BY queue
UNION ALL
SELECT NULL, 0, true WHERE EXISTS (
    SELECT FROM jobfence_jobs
    WHERE deadline < now() AND deadline IS NOT NULL AND state IN ` + deadlineStatesSQL() + `
      AND dependents IS NOT NULL)`

// lateTasksSQL discards, as promoteSQL discards other jobs, up to $1
// workflow tasks with dependents not started by their deadline. releaseSQL
// follows it in the same transaction, so that their dependents are
// cancelled with the reason, or run anyway, as a discard by the worker
// does. promoteSQL leaves these tasks to it, and says when there are some,
// so that a promoter pays the transaction only then.
//
// transition: deadline
var lateTasksSQL = `
WITH late AS (
    SELECT id FROM jobfence_jobs
    WHERE deadline < now() AND deadline IS NOT NULL AND state IN ` + deadlineStatesSQL() + `
      AND dependents IS NOT NULL
    ORDER BY deadline
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE jobfence_jobs j
SET ` + lateSet + `
FROM late
WHERE j.id = late.id
RETURNING j.id`

// Promote implements queue.Promoter: it makes up to limit scheduled and
// retryable jobs whose time has come (by the database's clock) available
// to claims, wakes the workers of their queues, and returns how many it
// made available per queue. It also discards up to limit jobs not started
// by their deadline (see promoteSQL), which it does not count, and takes
// up to limit edges of appended workflow tasks whose dependencies have
// ended (releaseAppended). Before it, it signals up to limit parents
// suspended awaiting a child workflow that has ended (childSweepSQL). Any
// number of instances may run it at once.
func (c *Client) Promote(ctx context.Context, limit int) (map[string]int, error) {
	if limit <= 0 {
		return nil, nil
	}
	// First the signals that tell suspended parents their child workflows
	// ended, so that this pass's promotion wakes them.
	if _, err := c.sweepChildren(ctx, limit); err != nil {
		return nil, err
	}
	if c.cfg.PriorityAging > 0 {
		if _, err := c.agePriorities(ctx); err != nil {
			return nil, err
		}
	}
	rows, err := c.pool.Query(ctx, promoteSQL, limit)
	if err != nil {
		return nil, fmt.Errorf("pgqueue: promote due jobs: %w", err)
	}
	defer rows.Close()
	var out map[string]int
	var lateTasks bool
	for rows.Next() {
		var q *string
		var n int
		var tasks bool
		if err := rows.Scan(&q, &n, &tasks); err != nil {
			return nil, fmt.Errorf("pgqueue: promote due jobs: %w", err)
		}
		if tasks {
			lateTasks = true
			continue
		}
		if out == nil {
			out = map[string]int{}
		}
		out[*q] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgqueue: promote due jobs: %w", err)
	}
	// The statement committed as its reply ended.
	c.wakeReady(ctx, out)
	if lateTasks {
		if err := c.discardLateTasks(ctx, limit); err != nil {
			return out, err
		}
	}
	// The edges of appended tasks whose dependencies have ended: the
	// bound of their release is this promoter's interval.
	if err := c.releaseAppended(ctx, limit); err != nil {
		return out, err
	}
	return out, nil
}

// discardLateTasks discards up to limit workflow tasks with dependents not
// started by their deadline, and cancels or releases their dependents, in
// one bounded transaction (see lateTasksSQL).
func (c *Client) discardLateTasks(ctx context.Context, limit int) error {
	err := c.boundedTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, lateTasksSQL, limit)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil || len(ids) == 0 {
			return err
		}
		return c.releaseFailed(ctx, tx, ids)
	})
	if err != nil {
		return fmt.Errorf("pgqueue: discard workflow tasks past their deadline: %w", err)
	}
	return nil
}
