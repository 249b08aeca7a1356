package pgqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
)

// rescueFindSQL reads up to $1 running jobs whose lease expired, oldest
// lease first, and whether each was claimed before the server last
// started. It locks nothing: rescueSQL takes the jobs, each still expired
// under the fence read here, in a statement of its own. No transaction
// spans the two, so a rescuer frozen between them (SIGSTOP, a paused VM)
// holds no job, and the next rescuer moves them; a transaction that
// locked them here kept every other rescuer off them for as long as the
// freeze lasted.
//
// It reads the running jobs through jobfence_jobs_running (migration
// 00006), whose predicate names attempted_at so that no other statement
// (a completion, a heartbeat: they say state = 'running' but nothing of
// attempted_at) can take that index to scan every running row. No index
// holds lease_expires_at: a heartbeat changes no indexed column and can
// be a HOT update, leaving the indexes alone. The lease is checked on the
// row; running jobs are few (the fleet's concurrency).
const rescueFindSQL = `
SELECT ` + jobColumns + `, j.attempted_at < pg_postmaster_start_time()
FROM jobfence_jobs j
WHERE j.state = 'running' AND j.attempted_at IS NOT NULL AND j.lease_expires_at < now()
ORDER BY j.lease_expires_at
LIMIT $1`

// rescueSQL takes the jobs rescueFindSQL read that are still running under
// the fence read, their lease still expired, and still claimed before the
// server's last start or not as read (put_backs > 0 says it was), and
// makes them retryable after their delay, or discards those out of
// attempts. The fence pins the attempt: a job completed, rescued or
// claimed again meanwhile is left alone, and a running attempt's row
// changes only by its heartbeats, which the lease check sees, so the job
// as read is the job moved. SKIP LOCKED keeps two rescuers off the same
// rows, and off a row whose holder is still committing; the rows it locks
// are checked again under their lock. One statement in a transaction of
// its own, it holds its rows only while the server runs it. (The coalesce
// keeps the restart check from implying attempted_at IS NOT NULL, which
// would let the planner scan jobfence_jobs_running rather than probe the
// primary key: see rescueFindSQL.)
//
// A job claimed before the server last started is put back: it gives its
// attempt back and is Ready at once (readySQL: available, or limited
// without its slot, to start again only through a grant, which takes a
// rate slot), as the restart, not the job, ended it; but the queue.PutBackLimit-th put-back in a row spends the
// attempt (give_back is false). The expired owner's fence stays on the
// row, but the state is no longer 'running', so its late outcomes are
// stale. Its arrays are read as completeSQL's are.
//
// A job that would be ready again only after its deadline (late) is
// discarded instead, with that reason after the lease's, as finishSQL
// does.
//
// transition: rescue
var rescueSQL = `
WITH r AS (
    SELECT j.id, r.delay, r.give_back, r.put_backs,
        ` + lateAgainSQL("r.give_back OR j.attempt < j.max_attempts", "r.delay") + ` AS late
    FROM unnest((SELECT $1::bigint[]), (SELECT $2::bigint[]), (SELECT $3::bigint[]), (SELECT $4::boolean[]),
                (SELECT $5::int[])) AS r(id, fence, delay, give_back, put_backs)
    JOIN jobfence_jobs j ON j.id = r.id AND j.fence = r.fence
    WHERE j.state = 'running' AND j.lease_expires_at < now()
      AND coalesce(j.attempted_at < pg_postmaster_start_time(), false) = (r.put_backs > 0)
    FOR UPDATE OF j SKIP LOCKED
)
UPDATE jobfence_jobs j
SET state = CASE WHEN r.late OR NOT r.give_back AND j.attempt >= j.max_attempts THEN 'discarded'
                 WHEN r.give_back THEN ` + readySQL("j.limit_name") + ` ELSE 'retryable' END,
    limit_slot = CASE WHEN r.give_back AND j.limit_name IS NOT NULL THEN NULL ELSE j.limit_slot END,
    attempt = CASE WHEN r.give_back THEN j.attempt - 1 ELSE j.attempt END,
    scheduled_at = now() + r.delay * interval '1 microsecond',
    errors = j.errors || jsonb_build_array(jsonb_build_object('attempt', j.attempt, 'at', now(), 'error',
        CASE WHEN r.give_back THEN 'lease expired: the database restarted while the job ran; the attempt is given back ('
                 || r.put_backs || ' in a row; at ' || $6::int || ' the attempt is spent)'
             WHEN r.put_backs > 0 THEN 'lease expired: the database restarted while the job ran, '
                 || r.put_backs || ' put-backs in a row: the attempt is spent'
             ELSE 'lease expired: the worker stopped heartbeating (crashed, paused or cut off)' END)
        || CASE WHEN r.give_back THEN jsonb_build_object('put_back', true, 'put_backs', r.put_backs)
                WHEN r.put_backs > 0 THEN jsonb_build_object('put_backs', r.put_backs)
                ELSE '{}'::jsonb END)
        || CASE WHEN r.late THEN ` + lateAgainErrorSQL("r.delay") + ` ELSE '[]'::jsonb END,
    finalized_at = CASE WHEN r.late OR NOT r.give_back AND j.attempt >= j.max_attempts THEN now() END,
    lease_expires_at = NULL
FROM r
WHERE j.id = r.id AND j.state = 'running'
RETURNING j.limit_name, j.limit_part`

// Rescue implements queue.Maintainer. Every instance may run it; SKIP LOCKED
// keeps two rescuers off the same rows. A job whose attempt is spent waits
// p.Backoff (the worker's retry policy); one given back runs again at once.
func (c *Client) Rescue(ctx context.Context, p queue.RescueParams) (int, error) {
	rows, err := c.pool.Query(ctx, rescueFindSQL, p.Limit)
	if err != nil {
		return 0, fmt.Errorf("pgqueue: rescue: %w", err)
	}
	var ids, fences, delays []int64
	var giveBack []bool
	var putBacks []int32
	var tasks []int64
	for rows.Next() {
		var j *queue.Job
		var restarted bool
		j, err = scanJob(scanWith{rows, &restarted})
		if err != nil {
			rows.Close()
			return 0, fmt.Errorf("pgqueue: rescue: %w", err)
		}
		// Its claim is over, and rescueSQL moves it only under the fence
		// read: its errors are the ones the update appends to.
		n := 0
		if restarted {
			n = queue.PutBacksInARow(j.Errors) + 1
		}
		back := restarted && n < queue.PutBackLimit
		var d time.Duration
		if !back && p.Backoff != nil {
			d = p.Backoff(j)
		}
		ids, fences, delays = append(ids, j.ID), append(fences, j.Fence), append(delays, d.Microseconds())
		giveBack, putBacks = append(giveBack, back), append(putBacks, int32(n))
		if j.WorkflowID != "" {
			tasks = append(tasks, j.ID)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("pgqueue: rescue: %w", err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	n := 0
	var lims partitionSet
	scan := func(moved pgx.Rows) error {
		defer moved.Close()
		for moved.Next() {
			var limName, limPart *string
			if err := moved.Scan(&limName, &limPart); err != nil {
				return err
			}
			n++
			if limName != nil && limPart != nil {
				lims.add(partition{*limName, *limPart})
			}
		}
		return moved.Err()
	}
	if len(tasks) > 0 {
		// A discarded task cancels its dependents in the same transaction
		// (see finishBatch).
		err = c.boundedTx(ctx, func(tx pgx.Tx) error {
			moved, err := tx.Query(ctx, rescueSQL, ids, fences, delays, giveBack, putBacks, queue.PutBackLimit)
			if err != nil {
				return err
			}
			if err := scan(moved); err != nil {
				return err
			}
			return c.releaseFailed(ctx, tx, tasks)
		})
	} else {
		var moved pgx.Rows
		if moved, err = c.pool.Query(ctx, rescueSQL, ids, fences, delays, giveBack, putBacks, queue.PutBackLimit); err == nil {
			err = scan(moved)
		}
	}
	if err != nil {
		return 0, fmt.Errorf("pgqueue: rescue: %w", err)
	}
	// A rescued job's slot is free (unless its limit holds it through a
	// retry): the next waiting job of its partition gets it now.
	c.grantAfter(ctx, lims.list)
	return n, nil
}

// scanWith scans a row of jobColumns followed by extra columns.
type scanWith struct {
	row   pgx.Row
	extra any
}

func (s scanWith) Scan(dest ...any) error { return s.row.Scan(append(dest, s.extra)...) }

// pruneSQL deletes up to $2 final jobs finalized more than their state's
// retention ago ($1 completed, $3 cancelled, $4 discarded), oldest first,
// through jobfence_jobs_finalized: the shortest retention bounds the
// index scan, and each row is checked against its own state's. (A scan
// so passes over the final jobs kept longer than the shortest retention
// that are older than it: discarded and cancelled jobs are few beside
// completed ones, which mostly leave for the finished partitions.) A
// completed workflow task is kept while a task that depends on it is
// still in the table and not completed (waiting, running, or failed and
// retryable from the CLI): its output is what that task reads
// (TaskOutput), however long it waits. It goes once they have completed
// or been pruned themselves. The check probes the task's dependents by
// primary key, and only for a completed task that has some.
//
// transition: prune
const pruneSQL = `
WITH d AS (
DELETE FROM jobfence_jobs WHERE id IN (
    SELECT j.id FROM jobfence_jobs j
    WHERE j.state IN ('completed', 'discarded', 'cancelled')
      AND j.finalized_at < now() - least($1::bigint, $3::bigint, $4::bigint) * interval '1 microsecond'
      AND j.finalized_at < now() - (CASE j.state WHEN 'completed' THEN $1::bigint WHEN 'cancelled' THEN $3::bigint
                                                 ELSE $4::bigint END) * interval '1 microsecond'
      AND NOT (j.state = 'completed' AND j.dependents IS NOT NULL AND EXISTS (
          SELECT FROM jobfence_jobs d WHERE d.id = ANY(j.dependents) AND d.state <> 'completed'))
    ORDER BY j.finalized_at
    LIMIT $2
    FOR UPDATE OF j SKIP LOCKED
) RETURNING id
), s AS (
    DELETE FROM jobfence_steps WHERE job_id IN (SELECT id FROM d)
), g AS (
    DELETE FROM jobfence_signals WHERE job_id IN (SELECT id FROM d)
), l AS (
    DELETE FROM jobfence_attempt_logs WHERE job_id IN (SELECT id FROM d)
)
SELECT count(*) FROM d`

// pruneWorkflowsSQL deletes up to $2 workflows created more than the
// retention ($1) ago whose tasks have all been pruned, with their tasks'
// names: each task was finished, and pruned after the retention, so the
// workflow is over and nothing reads its rows any more. It reads the
// workflows oldest first through jobfence_workflows_created, and probes
// each one's tasks by primary key from their names (a workflow whose
// first task named is still there costs one probe); SKIP LOCKED passes
// over a workflow that an Append is adding tasks to (it holds the row:
// see workflowExistsSQL), so such a workflow is kept, with its new tasks.
const pruneWorkflowsSQL = `
WITH w AS (
    DELETE FROM jobfence_workflows WHERE id IN (
        SELECT w.id FROM jobfence_workflows w
        WHERE w.created_at < now() - $1::bigint * interval '1 microsecond'
          AND NOT EXISTS (SELECT FROM jobfence_workflow_tasks s JOIN jobfence_jobs j ON j.id = s.job_id
                          WHERE s.workflow_id = w.id)
        ORDER BY w.created_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED
    )
    RETURNING id
)
DELETE FROM jobfence_workflow_tasks s USING w WHERE s.workflow_id = w.id`

// Prune implements queue.Maintainer: PruneStates with retention for
// every state.
func (c *Client) Prune(ctx context.Context, retention time.Duration, limit int) (int, error) {
	return c.PruneStates(ctx, queue.Retention{Completed: retention, Cancelled: retention, Discarded: retention}, limit)
}

// PruneStates implements queue.StatePruner: it deletes up to limit final
// jobs of the jobs table finalized more than their state's retention ago
// (r's zero fields count as zero: prune at once), then up to limit
// workflows created more than r.Longest() ago whose tasks are all pruned
// (see pruneWorkflowsSQL), in a bounded transaction of its own. A pruned
// job's unique key is free again, so keep each retention longer than any
// window in which the same key may be enqueued again (the scheduler's
// catch-up window is bounded by the shortest). It returns the jobs it
// deleted. Completed jobs in the finished partitions go with their
// partition (MaintainFinished, given r.Completed).
func (c *Client) PruneStates(ctx context.Context, r queue.Retention, limit int) (int, error) {
	var pruned int
	err := c.pool.QueryRow(ctx, pruneSQL, r.Completed.Microseconds(), limit, r.Cancelled.Microseconds(), r.Discarded.Microseconds()).Scan(&pruned)
	if err != nil {
		return 0, fmt.Errorf("pgqueue: prune: %w", err)
	}
	err = c.boundedTx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, pruneWorkflowsSQL, r.Longest().Microseconds(), limit)
		return err
	})
	if err != nil {
		return pruned, fmt.Errorf("pgqueue: prune workflows: %w", err)
	}
	return pruned, nil
}
