package pgqueue

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// A RunOnFailure task whose dependencies all completed is cancelled by the
// release of its last one (releaseLockTail's nofail), in a statement that
// cannot follow that cancel down to the task's own dependents: a
// completion's release is one statement, pipelined with the outcomes and
// the commit (finishAndGrant), and a range's is a statement of its own
// (releaseRangeSQL). So the statement records the task in
// jobfence_cascades (migration 00026), and the dependents are cancelled
// (or run anyway, or, RunOnFailure, counted as failed) as any cancel's
// are: in the same transaction when the release runs in one the client
// holds (release, cascadeInTx), else right after the commit by the client
// that sent it (cascadeAfterCommit), and by any worker's maintenance
// should that client stop first (ReleaseDependents(nil)). Deleting the
// row is what cascades, under its lock, so each task cascades once.

// cascadeSQL takes up to $2 rows of jobfence_cascades, of the tasks $1
// (NULL: of any), that no other session is taking, deletes them, and
// writes the tasks anew (their values unchanged) when they are still
// cancelled: the release that follows in the same transaction (release,
// with cascade) then passes the xmin test for them, and only for them. A
// task retried meanwhile is no longer cancelled; its next end releases
// its dependents.
//
// transition: release
const cascadeSQL = `
WITH x AS (
    DELETE FROM jobfence_cascades c WHERE c.task_id IN (
        SELECT task_id FROM jobfence_cascades
        WHERE $1::bigint[] IS NULL OR task_id = ANY($1::bigint[])
        ORDER BY task_id
        LIMIT $2
        FOR UPDATE SKIP LOCKED)
    RETURNING c.task_id
)
UPDATE jobfence_jobs j SET dependents_released = j.dependents_released
FROM x WHERE j.id = x.task_id AND j.state = 'cancelled'
RETURNING j.id`

// cascadeBatch bounds the tasks one transaction of cascadeLeft cascades.
const cascadeBatch = 100

// cascadeLeft cascades the cancels recorded in jobfence_cascades of the
// tasks ids (nil: of any task), cascadeBatch a transaction, until none is
// left that another session is not taking (or maxMaintainedRanges
// batches, for nil).
func (c *Client) cascadeLeft(ctx context.Context, ids []int64) error {
	if ids != nil && len(ids) == 0 {
		return nil
	}
	for range maxMaintainedRanges {
		var n int
		var ready map[string]int
		err := c.boundedTx(ctx, func(tx pgx.Tx) error {
			n, ready = 0, nil
			rows, err := tx.Query(ctx, cascadeSQL, ids, cascadeBatch)
			if err != nil {
				return err
			}
			var tasks []int64
			for rows.Next() {
				var id int64
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return err
				}
				tasks = append(tasks, id)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			n = len(tasks)
			if n == 0 {
				return nil
			}
			r, err := release(ctx, tx, tasks, true, c.cfg.ReleaseChunk, "")
			ready = r.ready
			return err
		})
		if err != nil {
			return fmt.Errorf("cascade the cancels of RunOnFailure tasks: %w", err)
		}
		c.wakeReady(ctx, ready)
		if n < cascadeBatch {
			return nil
		}
	}
	return nil
}

// cascadeAfterCommit cascades the cancels of the tasks ids that a
// committed release recorded (cascadeLeft); a failure is logged, and a
// worker's maintenance cascades them.
func (c *Client) cascadeAfterCommit(ctx context.Context, ids []int64) {
	if len(ids) == 0 {
		return
	}
	if err := c.cascadeLeft(ctx, ids); err != nil {
		c.cfg.Logger.Warn("pgqueue: cancelling the dependents of a RunOnFailure task failed; a worker's maintenance cancels them",
			"tasks", ids, "err", err)
	}
}
