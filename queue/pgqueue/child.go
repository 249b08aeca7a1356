package pgqueue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/jobfence/jobfence/queue"
)

// Child workflows (docs/durable.md, "Child workflows"): a workflow that a
// running job inserted from its handler (workflow.StartChild) records the
// job as its parent (jobfence_workflows.parent_job_id, migration 00032).
// The parent awaits it (workflow.AwaitChild) as it awaits a signal: the
// signal ChildSignal(id) tells it that the workflow ended. Nothing in the
// completion path knows of children: a completion's statements stay as
// they are for every task. The parent's AwaitChild sends the signal itself
// when it finds the child ended (ChildEnded); otherwise it suspends, and
// the promoter's sweep (childSweepSQL), which reads only the child
// workflows whose parent may still need telling, sends it once the child
// has ended.

// ErrNotChild reports an AwaitChild of a workflow that the awaiting job
// did not start.
var ErrNotChild = errors.New("jobfence: the workflow is not a child of this job")

// ChildSignal is the name of the signal that tells a parent job that its
// child workflow id ended (every task completed, discarded or cancelled).
func ChildSignal(id string) string { return childSignalPrefix + id }

// childSignalPrefix prefixes ChildSignal's names.
const childSignalPrefix = "jobfence:child:"

// childRowSQL inserts child workflow $1 named $2 of job $3, while the job
// runs under fence $4, whose row it share-locks until the insert commits:
// a cancel of the job waits for it, and then finds the child to cancel. It
// replies whether the fence held and whether it inserted the row (not if
// the workflow exists: a retried start).
const childRowSQL = `
WITH p AS (SELECT id FROM jobfence_jobs WHERE id = $3 AND fence = $4 AND state = 'running' FOR SHARE),
ins AS (
    INSERT INTO jobfence_workflows (id, name, parent_job_id)
    SELECT $1, $2, $3 FROM p
    ON CONFLICT (id) DO NOTHING
    RETURNING id
)
SELECT EXISTS (SELECT FROM p), EXISTS (SELECT FROM ins)`

// insertChildRow inserts the row of child workflow id (p.Parent's). It
// returns started when the workflow was inserted before (a retried
// start), with its tasks, and the insert should stop there.
func insertChildRow(ctx context.Context, tx pgx.Tx, id pgtype.UUID, p queue.WorkflowParams) (res queue.WorkflowResult, started bool, err error) {
	fail := func(err error) (queue.WorkflowResult, bool, error) {
		return queue.WorkflowResult{}, false, fmt.Errorf("pgqueue: insert child workflow %s of job %d: %w", p.ID, p.Parent.ID, err)
	}
	var held, inserted bool
	if err := tx.QueryRow(ctx, childRowSQL, id, p.Name, p.Parent.ID, p.Parent.Fence).Scan(&held, &inserted); err != nil {
		return fail(err)
	}
	if !held {
		return fail(&queue.StaleFenceError{Lease: p.Parent})
	}
	if inserted {
		return queue.WorkflowResult{}, false, nil
	}
	var parent *int64
	if err := tx.QueryRow(ctx, `SELECT parent_job_id FROM jobfence_workflows WHERE id = $1`, id).Scan(&parent); err != nil {
		return fail(err)
	}
	if parent == nil || *parent != p.Parent.ID {
		return fail(fmt.Errorf("%w: the ID is another workflow's", queue.ErrInvalidWorkflow))
	}
	rows, err := tx.Query(ctx, `SELECT task_name, job_id FROM jobfence_workflow_tasks WHERE workflow_id = $1`, id)
	if err != nil {
		return fail(err)
	}
	res = queue.WorkflowResult{ID: uuidString(id), Tasks: map[string]int64{}}
	for rows.Next() {
		var name string
		var job int64
		if err := rows.Scan(&name, &job); err != nil {
			rows.Close()
			return fail(err)
		}
		res.Tasks[name] = job
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	return res, true, nil
}

// unfinishedTasksSQL is a condition: workflow w has a task that has not
// ended.
const unfinishedTasksSQL = `EXISTS (SELECT FROM jobfence_workflow_tasks s JOIN jobfence_jobs j ON j.id = s.job_id
    WHERE s.workflow_id = w.id AND j.state NOT IN ` + "('completed', 'discarded', 'cancelled'))"

// childEndedSQL stores, for parent job $2, signal $3 (ChildSignal of
// workflow $1) if the workflow has ended, unless the parent has it
// undelivered or has recorded the wait that took it (its step), and marks
// the parent told. The caller has locked the workflow's row, so the sweep
// (which skips it) and another call wait; this statement, run after the
// lock, sees what they committed. It replies whether the workflow ended.
const childEndedSQL = `
WITH e AS (
    SELECT NOT ` + unfinishedTasksSQL + ` AS ended FROM jobfence_workflows w WHERE w.id = $1
), s AS (
    INSERT INTO jobfence_signals (job_id, name, payload)
    SELECT $2, $3, jsonb_build_object('workflow', $1::text) FROM e
    WHERE e.ended
      AND NOT EXISTS (SELECT FROM jobfence_signals g WHERE g.job_id = $2 AND g.name = $3 AND g.delivered_at IS NULL)
      AND NOT EXISTS (SELECT FROM jobfence_steps t WHERE t.job_id = $2 AND t.name = 'jobfence:signal:' || $3)
), u AS (
    UPDATE jobfence_workflows w SET parent_signalled_at = now()
    FROM e WHERE w.id = $1 AND e.ended AND w.parent_signalled_at IS NULL
)
SELECT ended FROM e`

// ChildEnded reports whether child workflow id of job parent has ended,
// and if so makes sure that the parent has the signal ChildSignal(id) to
// take (unless it took it already): the parent's workflow.AwaitChild calls
// it before its wait, so a child that ended before the wait is not left
// to the promoter's sweep. A workflow that is not parent's child is an
// error wrapping ErrNotChild; an unknown one, queue.ErrWorkflowNotFound.
func (c *Client) ChildEnded(ctx context.Context, parent int64, id string) (bool, error) {
	var u pgtype.UUID
	if err := u.Scan(id); err != nil {
		return false, fmt.Errorf("pgqueue: child workflow %q: %w (not a UUID)", id, queue.ErrWorkflowNotFound)
	}
	var ended bool
	err := c.boundedTx(ctx, func(tx pgx.Tx) error {
		var of *int64
		err := tx.QueryRow(ctx, `SELECT parent_job_id FROM jobfence_workflows WHERE id = $1 FOR UPDATE`, u).Scan(&of)
		if errors.Is(err, pgx.ErrNoRows) {
			return queue.ErrWorkflowNotFound
		}
		if err != nil {
			return err
		}
		if of == nil || *of != parent {
			return ErrNotChild
		}
		return tx.QueryRow(ctx, childEndedSQL, u, parent, ChildSignal(id)).Scan(&ended)
	})
	if err != nil {
		return false, fmt.Errorf("pgqueue: child workflow %s of job %d: %w", id, parent, err)
	}
	return ended, nil
}

// childSweepSQL tells the parents of up to $1 ended child workflows that
// await them: for each child workflow whose parent was not told (the
// partial index jobfence_workflows_open_children holds only those), oldest
// first, whose parent is suspended awaiting it, it stores the signal
// ChildSignal (the promoter's pass that follows makes the parent Ready:
// promoteSQL's signalled), and marks it told. A child whose parent has
// ended (or is gone) leaves the index the same way, without a signal; one
// whose parent runs, or waits for something else, stays: its
// AwaitChild will find it ended (ChildEnded). The cost of a pass is one
// probe of the index per such workflow, and of its tasks for those whose
// parent awaits; with no child workflow, one probe. SKIP LOCKED keeps the
// promoters off each other's rows and off a ChildEnded's.
const childSweepSQL = `
WITH c AS MATERIALIZED (
    SELECT w.id, w.parent_job_id,
           coalesce(p.state = 'scheduled' AND p.awaiting = '` + childSignalPrefix + `' || w.id::text, false) AS awaits
    FROM jobfence_workflows w LEFT JOIN jobfence_jobs p ON p.id = w.parent_job_id
    WHERE w.parent_job_id IS NOT NULL AND w.parent_signalled_at IS NULL
      AND (p.id IS NULL OR p.state IN ('completed', 'discarded', 'cancelled')
           OR (p.state = 'scheduled' AND p.awaiting = '` + childSignalPrefix + `' || w.id::text))
      AND NOT ` + unfinishedTasksSQL + `
    ORDER BY w.created_at
    LIMIT $1
    FOR UPDATE OF w SKIP LOCKED
), s AS (
    INSERT INTO jobfence_signals (job_id, name, payload)
    SELECT c.parent_job_id, '` + childSignalPrefix + `' || c.id::text, jsonb_build_object('workflow', c.id::text) FROM c
    WHERE c.awaits AND NOT EXISTS (
        SELECT FROM jobfence_signals g
        WHERE g.job_id = c.parent_job_id AND g.name = '` + childSignalPrefix + `' || c.id::text AND g.delivered_at IS NULL)
    RETURNING job_id
), u AS (
    UPDATE jobfence_workflows w SET parent_signalled_at = now() FROM c WHERE w.id = c.id
)
SELECT count(*) FROM s`

// sweepChildren runs childSweepSQL for up to limit child workflows and
// returns how many parents it signalled.
func (c *Client) sweepChildren(ctx context.Context, limit int) (int, error) {
	var n int
	if err := c.pool.QueryRow(ctx, childSweepSQL, limit).Scan(&n); err != nil {
		return 0, fmt.Errorf("pgqueue: tell the parents of ended child workflows: %w", err)
	}
	return n, nil
}

// cancelChildrenSQL cancels every task that has not ended of the child
// workflows of jobs $1, running ones included, and tells the workers of
// those (cancelChannel, as cancelSQL does), in the same statement. It
// replies with the IDs of the tasks it cancelled, whose own child
// workflows the caller cancels next. The rows are locked in ID order, as
// a finish locks its task and then its dependents.
//
// transition: cancel, cancel-waiting
const cancelChildrenSQL = `
WITH l AS MATERIALIZED (
    SELECT j.id FROM jobfence_workflows w
    JOIN jobfence_workflow_tasks s ON s.workflow_id = w.id
    JOIN jobfence_jobs j ON j.id = s.job_id
    WHERE w.parent_job_id = ANY($1::bigint[]) AND j.state NOT IN ('completed', 'discarded', 'cancelled')
    ORDER BY j.id
    FOR UPDATE OF j
), c AS (
    UPDATE jobfence_jobs j
    SET state = 'cancelled', finalized_at = now(), lease_expires_at = NULL,
        errors = j.errors || jsonb_build_array(jsonb_build_object('attempt', j.attempt, 'at', now(),
            'error', 'cancelled by request: its parent job was cancelled'))
    FROM l
    WHERE j.id = l.id AND j.state NOT IN ('completed', 'discarded', 'cancelled')
    RETURNING j.id, j.fence
)
SELECT id, pg_notify($2, id::text || ':' || fence::text) IS NULL FROM c`

// maxChildDepth bounds how deep a cancel follows child workflows of child
// workflows: a deeper lineage is left running, and the cancel fails with
// ErrChildrenTooDeep, so that it is not mistaken for complete.
const maxChildDepth = 64

// ErrChildrenTooDeep reports a cancel whose lineage of child workflows is
// deeper than it follows (64 generations): the deeper ones still run.
var ErrChildrenTooDeep = errors.New("jobfence: child workflows nested too deep to cancel")

// cancelChildren cancels, in tx, the child workflows of jobs (every task
// that has not ended, running ones through their workers' cancel), and
// theirs, generation by generation.
func (c *Client) cancelChildren(ctx context.Context, tx pgx.Tx, jobs []int64) error {
	for depth := 0; len(jobs) > 0; depth++ {
		if depth == maxChildDepth {
			return fmt.Errorf("pgqueue: cancel child workflows: %w", ErrChildrenTooDeep)
		}
		rows, err := tx.Query(ctx, cancelChildrenSQL, jobs, cancelChannel)
		if err != nil {
			return fmt.Errorf("pgqueue: cancel child workflows: %w", err)
		}
		next, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (int64, error) {
			var id int64
			var sent bool
			return id, r.Scan(&id, &sent)
		})
		if err != nil {
			return fmt.Errorf("pgqueue: cancel child workflows: %w", err)
		}
		jobs = next
	}
	return nil
}

// ChildWorkflow is a workflow started by a job (its parent).
type ChildWorkflow struct {
	// ID is the workflow's ID.
	ID string
	// Name is its name.
	Name string
	// ParentJobID is the job that started it.
	ParentJobID int64
	// CreatedAt is when it was started.
	CreatedAt time.Time
}

// maxChildrenListed bounds the child workflows ChildWorkflows returns.
const maxChildrenListed = 1000

// ChildWorkflows returns the child workflows of jobs (workflow.StartChild),
// oldest first, 1,000 at most, through the index of their parents.
func (c *Client) ChildWorkflows(ctx context.Context, jobs ...int64) ([]ChildWorkflow, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	rows, err := c.pool.Query(ctx, `SELECT id, name, parent_job_id, created_at FROM jobfence_workflows
		WHERE parent_job_id = ANY($1::bigint[]) ORDER BY created_at, id LIMIT $2`, jobs, maxChildrenListed)
	if err != nil {
		return nil, fmt.Errorf("pgqueue: child workflows: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ChildWorkflow, error) {
		var w ChildWorkflow
		var u pgtype.UUID
		err := r.Scan(&u, &w.Name, &w.ParentJobID, &w.CreatedAt)
		w.ID = uuidString(u)
		return w, err
	})
	if err != nil {
		return nil, fmt.Errorf("pgqueue: child workflows: %w", err)
	}
	return out, nil
}
