package pgqueue

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Tasks appended to a running workflow (workflow.Append,
// InsertWorkflowTx) depend on existing tasks through jobfence_task_edges
// (migration 00024, addEdgesSQL), not through the existing task's
// dependents: the caller's transaction writes no row that a worker
// writes. The promoter takes the edges whose dependency has ended
// (releaseAppended), within its interval of that end or of the append's
// commit, whichever is later.

// appendedEndedSQL says whether some edge waits whose dependency has
// ended or is gone: the promoter runs the sweep's transaction only then.
// The edges are few (those of appends whose dependencies have not ended
// yet), and the dependencies are probed once each.
var appendedEndedSQL = `
SELECT EXISTS (
    SELECT FROM (SELECT DISTINCT dependency FROM jobfence_task_edges) e
    LEFT JOIN jobfence_jobs p ON p.id = e.dependency
    WHERE p.id IS NULL OR p.state IN ` + finalStatesSQL + `)`

// releaseAppendedSQL takes up to $1 edges whose dependency has ended (or
// was deleted): each is deleted, and that deletion is what releases its
// dependent, so that two sweeps at once, or a sweep after a Retry of the
// dependency, release it once. A counted edge releases its pending
// dependent as a completion's release does (releaseLockTail,
// releaseUpdateTail): a completed dependency, or any end for a dependent
// that runs anyway, takes one off its deps_left, and a failed or deleted
// one cancels it (its own dependents are cancelled by releaseFailed, in
// the same transaction), unless it runs on a failure: then it counts the
// end, the failure recorded, and is cancelled if its last dependency ends
// with none failed (its dependents cancelled by cascadeInTx, in the same
// transaction). Every edge's dependent is added to its
// dependency's dependents, which the pruner's keep rule and a later
// RetryWorkflow read.
//
// Dependencies and dependents are locked with SKIP LOCKED, in ID order:
// the sweep waits for no one (an edge whose rows another holds is taken
// by a later pass), and an edge is deleted only with both its rows held,
// so that a dependency retried meanwhile (no longer final once locked)
// keeps its edges for its next end. The reply is a row per queue that
// dependents became available in, and one per dependent cancelled.
//
// transition: release
var releaseAppendedSQL = `
WITH c AS MATERIALIZED (
    SELECT e.dependency, e.dependent, p.id IS NULL AS gone
    FROM jobfence_task_edges e LEFT JOIN jobfence_jobs p ON p.id = e.dependency
    WHERE p.id IS NULL OR p.state IN ` + finalStatesSQL + `
    ORDER BY e.dependency, e.dependent
    LIMIT $1
), pl AS MATERIALIZED (
    SELECT p.id, p.state, p.task_name FROM jobfence_jobs p
    WHERE p.id IN (SELECT dependency FROM c) AND p.state IN ` + finalStatesSQL + `
    ORDER BY p.id
    FOR NO KEY UPDATE SKIP LOCKED
), tl AS MATERIALIZED (
    SELECT t.id, t.run_anyway, t.run_on_failure FROM jobfence_jobs t
    WHERE t.id IN (SELECT dependent FROM c)
    ORDER BY t.id
    FOR UPDATE SKIP LOCKED
), x AS (
    DELETE FROM jobfence_task_edges e USING c
    WHERE e.dependency = c.dependency AND e.dependent = c.dependent
      AND (c.gone OR c.dependency IN (SELECT id FROM pl))
      AND (c.dependent IN (SELECT id FROM tl) OR NOT EXISTS (SELECT FROM jobfence_jobs t WHERE t.id = c.dependent))
    RETURNING e.dependency, e.dependent, e.counted
), k AS (
    SELECT x.dependency, x.dependent, tl.run_anyway, pl.state AS dep_state, pl.task_name AS dep_name,
           pl.state IS DISTINCT FROM 'completed' AS failed,
           pl.state IS DISTINCT FROM 'completed' AND tl.run_anyway IS NOT TRUE AND tl.run_on_failure IS NOT TRUE AS fails
    FROM x JOIN tl ON tl.id = x.dependent LEFT JOIN pl ON pl.id = x.dependency
    WHERE x.counted
), s AS (
    SELECT dependent AS id, count(*) FILTER (WHERE NOT fails)::int AS n, bool_or(failed) AS failed, bool_or(fails) AS cancel,
           min(coalesce(dep_name, '')) FILTER (WHERE fails) AS cause,
           min(coalesce(dep_state, 'deleted')) FILTER (WHERE fails) AS cause_state
    FROM k GROUP BY dependent
)` + releaseLockTail + releaseUpdateTail + `, listed AS (
    UPDATE jobfence_jobs p SET dependents = coalesce(p.dependents, '{}') || g.ids
    FROM (SELECT dependency, array_agg(dependent ORDER BY dependent) AS ids FROM x
          WHERE dependency IN (SELECT id FROM pl) GROUP BY dependency) g
    WHERE p.id = g.dependency
)
SELECT r.queue, NULL::bigint, NULL::text FROM (SELECT DISTINCT queue FROM u WHERE u.state = 'available') r
UNION ALL
SELECT NULL, u.id, NULL FROM u WHERE u.state = 'cancelled' AND NOT u.nofail
UNION ALL
SELECT NULL, task_id, 'cascade' FROM cq`

// releaseAppended takes up to limit edges of appended tasks whose
// dependency has ended (releaseAppendedSQL), in a bounded transaction,
// and wakes the workers of the queues whose tasks it made available. The
// probe before it (appendedEndedSQL) spares a promoter with nothing to
// take the transaction.
func (c *Client) releaseAppended(ctx context.Context, limit int) error {
	var some bool
	if err := c.pool.QueryRow(ctx, appendedEndedSQL).Scan(&some); err != nil {
		return fmt.Errorf("pgqueue: release appended tasks: %w", err)
	}
	if !some {
		return nil
	}
	var ready map[string]int
	err := c.boundedTx(ctx, func(tx pgx.Tx) error {
		ready = nil
		// The sweep adds the appended tasks to their dependencies'
		// dependents lists, which it stores anew: a fan-out's root's is
		// long (see listcompression.go). The setting is this transaction's.
		if _, err := compressListsWithLZ4(ctx, tx); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, releaseAppendedSQL, limit)
		if err != nil {
			return err
		}
		var cancelled, cascades []int64
		for rows.Next() {
			var q, kind *string
			var id *int64
			if err := rows.Scan(&q, &id, &kind); err != nil {
				rows.Close()
				return err
			}
			switch {
			case q != nil:
				if ready == nil {
					ready = map[string]int{}
				}
				ready[*q]++
			case id != nil && kind != nil:
				cascades = append(cascades, *id)
			case id != nil:
				cancelled = append(cancelled, *id)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(cascades) > 0 {
			if _, err := cascadeInTx(ctx, tx, cascades, c.cfg.ReleaseChunk, insertChannel); err != nil {
				return err
			}
		}
		if len(cancelled) == 0 {
			return nil
		}
		return c.releaseFailed(ctx, tx, cancelled)
	})
	if err != nil {
		return fmt.Errorf("pgqueue: release appended tasks: %w", err)
	}
	c.wakeReady(ctx, ready)
	return nil
}
