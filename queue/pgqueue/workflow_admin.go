package pgqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/jobfence/jobfence/queue"
)

// taskOutputSQL reads, for task $1, the state and output of the task named
// $2 of its workflow (found by name in jobfence_workflow_tasks), and
// whether that task is an ancestor of $1: reached from $1 through
// depends_on, an appended task's dependencies on existing tasks included.
// The walk is bounded by the workflow's tasks, and by the target's ID: a
// dependency's ID is always below its dependents' (tasks draw their IDs
// in dependency order, and an appended task draws its own after every
// task it depends on), so only tasks above it are expanded, each once
// (UNION), with a primary-key probe. A direct dependency is found without
// walking. gap says the walk met a task that is gone (pruned): the
// target may be an ancestor past it.
const taskOutputSQL = `
WITH RECURSIVE me AS MATERIALIZED (
    SELECT t.id, t.workflow_id, t.depends_on FROM jobfence_jobs t WHERE t.id = $1
), tg AS MATERIALIZED (
    SELECT s.job_id FROM me JOIN jobfence_workflow_tasks s ON s.workflow_id = me.workflow_id AND s.task_name = $2
), anc(id) AS (
    SELECT u.id FROM me CROSS JOIN LATERAL unnest(me.depends_on) AS u(id)
  UNION
    SELECT u.id FROM anc
    CROSS JOIN LATERAL (SELECT p.depends_on FROM jobfence_jobs p WHERE p.id = anc.id OFFSET 0) p
    CROSS JOIN LATERAL unnest(p.depends_on) AS u(id)
    WHERE anc.id > (SELECT job_id FROM tg) AND NOT (SELECT job_id FROM tg) = ANY((SELECT depends_on FROM me)::bigint[])
)
SELECT EXISTS (SELECT FROM me), (SELECT job_id FROM tg) IS NOT NULL,
       EXISTS (SELECT FROM anc WHERE anc.id = (SELECT job_id FROM tg)),
       EXISTS (SELECT FROM anc WHERE anc.id > (SELECT job_id FROM tg)
                 AND NOT EXISTS (SELECT FROM jobfence_jobs p WHERE p.id = anc.id)),
       d.state, d.output
FROM (SELECT) x LEFT JOIN jobfence_jobs d ON d.id = (SELECT job_id FROM tg)`

// TaskOutput returns the output that the task named name recorded, read
// for the task job (a task of the same workflow of which it is an
// ancestor: a dependency, a dependency's dependency, and so on). It
// returns an error wrapping queue.ErrNotAncestor when it is not (a
// sibling, a later task: it may not have run yet, and retrying cannot
// help) or when the workflow has no such task (then queue.ErrJobNotFound
// too), queue.ErrNoOutput when the task did not complete (a dependent that
// runs anyway) or recorded nothing, or is gone (pruned after
// Config.Retention), and queue.ErrJobNotFound when job is gone.
func (c *Client) TaskOutput(ctx context.Context, job int64, name string) (json.RawMessage, error) {
	var found, named, ancestor, gap bool
	var state *string
	var output []byte
	err := c.pool.QueryRow(ctx, taskOutputSQL, job, name).Scan(&found, &named, &ancestor, &gap, &state, &output)
	switch {
	case err != nil:
		return nil, fmt.Errorf("pgqueue: output of task %q: %w", name, err)
	case !found:
		return nil, fmt.Errorf("pgqueue: output of task %q: %w: job %d", name, queue.ErrJobNotFound, job)
	case !named:
		return nil, fmt.Errorf("pgqueue: output of task %q: %w: %w: the workflow of job %d has no task of that name",
			name, queue.ErrNotAncestor, queue.ErrJobNotFound, job)
	case !ancestor && gap:
		return nil, fmt.Errorf("pgqueue: output of task %q: %w: a task between it and job %d was pruned (Retention)", name, queue.ErrNoOutput, job)
	case !ancestor:
		return nil, fmt.Errorf("pgqueue: output of task %q: %w (job %d): it is not among the tasks this one depends on, directly or through others; add it to DependsOn",
			name, queue.ErrNotAncestor, job)
	case state == nil:
		return nil, fmt.Errorf("pgqueue: output of task %q: %w: the task was pruned (Retention)", name, queue.ErrNoOutput)
	case *state != string(queue.StateCompleted):
		return nil, fmt.Errorf("pgqueue: output of task %q: %w: the task is %s", name, queue.ErrNoOutput, *state)
	case output == nil:
		return nil, fmt.Errorf("pgqueue: output of task %q: %w: the task completed without recording any", name, queue.ErrNoOutput)
	}
	return output, nil
}

// WorkflowInfo is a workflow and how far it has come.
type WorkflowInfo struct {
	ID        string
	Name      string
	CreatedAt time.Time
	// Counts holds how many of its tasks are in each state.
	Counts map[queue.State]int64
	// Tasks holds its tasks, by ID (in dependency order), from Workflow
	// only.
	Tasks []*Task
	// ParentJobID is the job that started it as a child workflow
	// (workflow.StartChild); zero for a workflow inserted otherwise.
	ParentJobID int64
	// Children are the child workflows its tasks started, from Workflow
	// only (1,000 at most).
	Children []ChildWorkflow
	// ReleasesLeft counts the ranges of dependents that its completed
	// tasks have left to release after their completions (see
	// Client.ReleaseDependents), from Workflow only: ranges that stay
	// mean that no worker of this release runs its rescue pass.
	ReleasesLeft int
}

// Task is a workflow task as stored: its job and its dependencies.
type Task struct {
	*queue.Job
	// DepsLeft counts the dependencies it still waits for.
	DepsLeft int
	// RunAnyway says it runs even if a dependency failed.
	RunAnyway bool
	// RunOnFailure says it runs only if a dependency failed.
	RunOnFailure bool
	// FinalizedAt is when it ended; zero while it has not.
	FinalizedAt time.Time
}

// Total is how many tasks the workflow has.
func (w *WorkflowInfo) Total() int64 {
	var n int64
	for _, c := range w.Counts {
		n += c
	}
	return n
}

// Done reports whether every task has ended.
func (w *WorkflowInfo) Done() bool {
	var final int64
	for s, c := range w.Counts {
		if s.Final() {
			final += c
		}
	}
	return final == w.Total()
}

// workflowCountsSQL counts a workflow's tasks by state.
const workflowCountsSQL = `SELECT j.state, count(*) FROM ` + workflowTaskRowsSQL + ` GROUP BY j.state`

// workflowTasksSQL reads a workflow's tasks, in ID order.
const workflowTasksSQL = `SELECT ` + jobColumns + `, coalesce(j.deps_left, 0), coalesce(j.run_anyway, false), coalesce(j.run_on_failure, false), j.finalized_at
FROM ` + workflowTaskRowsSQL + ` ORDER BY j.id`

// Workflow returns workflow id with its tasks, or an error wrapping
// queue.ErrWorkflowNotFound.
func (c *Client) Workflow(ctx context.Context, id string) (*WorkflowInfo, error) {
	w, err := c.workflowRow(ctx, id)
	if err != nil {
		return nil, err
	}
	rows, err := c.pool.Query(ctx, workflowTasksSQL, id)
	if err != nil {
		return nil, fmt.Errorf("pgqueue: workflow %s: %w", id, err)
	}
	defer rows.Close()
	w.Counts = map[queue.State]int64{}
	for rows.Next() {
		t := &Task{}
		var fin *time.Time
		var left int32
		j, err := scanJob(rows, &left, &t.RunAnyway, &t.RunOnFailure, &fin)
		if err != nil {
			return nil, fmt.Errorf("pgqueue: workflow %s: %w", id, err)
		}
		t.Job, t.DepsLeft = j, int(left)
		if fin != nil {
			t.FinalizedAt = *fin
		}
		w.Tasks = append(w.Tasks, t)
		w.Counts[j.State]++
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgqueue: workflow %s: %w", id, err)
	}
	if w.ReleasesLeft, err = c.ReleasesLeft(ctx, id); err != nil {
		return nil, err
	}
	ids := make([]int64, len(w.Tasks))
	for i, t := range w.Tasks {
		ids[i] = t.ID
	}
	if w.Children, err = c.ChildWorkflows(ctx, ids...); err != nil {
		return nil, err
	}
	return w, nil
}

func (c *Client) workflowRow(ctx context.Context, id string) (*WorkflowInfo, error) {
	var u pgtype.UUID
	if err := u.Scan(id); err != nil {
		return nil, fmt.Errorf("pgqueue: workflow %q: %w (not a UUID)", id, queue.ErrWorkflowNotFound)
	}
	w := &WorkflowInfo{ID: id}
	var parent *int64
	err := c.pool.QueryRow(ctx, `SELECT name, created_at, parent_job_id FROM jobfence_workflows WHERE id = $1`, u).Scan(&w.Name, &w.CreatedAt, &parent)
	if parent != nil {
		w.ParentJobID = *parent
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("pgqueue: workflow %s: %w", id, queue.ErrWorkflowNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("pgqueue: workflow %s: %w", id, err)
	}
	w.ID = uuidString(u)
	return w, nil
}

// ListWorkflows returns the newest limit workflows (100 when limit is not
// positive) created before before (all when zero), newest first, each
// with its tasks counted by state.
func (c *Client) ListWorkflows(ctx context.Context, before time.Time, limit int) ([]*WorkflowInfo, error) {
	if limit <= 0 {
		limit = 100
	}
	var at *time.Time
	if !before.IsZero() {
		at = &before
	}
	rows, err := c.pool.Query(ctx, `SELECT id, name, created_at FROM jobfence_workflows
		WHERE $1::timestamptz IS NULL OR created_at < $1 ORDER BY created_at DESC, id DESC LIMIT $2`, at, limit)
	if err != nil {
		return nil, fmt.Errorf("pgqueue: list workflows: %w", err)
	}
	var out []*WorkflowInfo
	for rows.Next() {
		w := &WorkflowInfo{Counts: map[queue.State]int64{}}
		var u pgtype.UUID
		if err := rows.Scan(&u, &w.Name, &w.CreatedAt); err != nil {
			rows.Close()
			return nil, fmt.Errorf("pgqueue: list workflows: %w", err)
		}
		w.ID = uuidString(u)
		out = append(out, w)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgqueue: list workflows: %w", err)
	}
	for _, w := range out {
		if err := c.countTasks(ctx, w); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (c *Client) countTasks(ctx context.Context, w *WorkflowInfo) error {
	rows, err := c.pool.Query(ctx, workflowCountsSQL, w.ID)
	if err != nil {
		return fmt.Errorf("pgqueue: workflow %s: %w", w.ID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		var n int64
		if err := rows.Scan(&s, &n); err != nil {
			return fmt.Errorf("pgqueue: workflow %s: %w", w.ID, err)
		}
		w.Counts[queue.State(s)] = n
	}
	return rows.Err()
}

// cancelWorkflowSQL cancels the tasks of workflow $1 that have not started
// (pending, or waiting to run), in ID order. A running task is left to
// end: its dependents, cancelled here, are no longer pending and its end
// releases nothing.
//
// transition: cancel, cancel-waiting
const cancelWorkflowSQL = `
WITH l AS MATERIALIZED (
    SELECT j.id FROM ` + workflowTaskRowsSQL + `
      AND j.state IN ('pending', 'available', 'scheduled', 'retryable')
    ORDER BY j.id
    FOR UPDATE OF j
)
UPDATE jobfence_jobs j
SET state = 'cancelled', finalized_at = now(),
    errors = j.errors || jsonb_build_array(jsonb_build_object('attempt', j.attempt, 'at', now(), 'error', 'cancelled by request: workflow cancelled'))
FROM l
WHERE j.id = l.id AND j.state IN ('pending', 'available', 'scheduled', 'retryable')
RETURNING j.id`

// CancelWorkflow cancels every task of workflow id that has not started,
// and returns how many. Tasks running now run to their end. The child
// workflows of the tasks it cancels (a task suspended awaiting one) are
// cancelled with them, running tasks included (see Cancel).
func (c *Client) CancelWorkflow(ctx context.Context, id string) (int, error) {
	if _, err := c.workflowRow(ctx, id); err != nil {
		return 0, err
	}
	// A task appended (workflow.Append) while the statement waited for
	// the rows it locks is not in its snapshot: a pass of its own, after
	// that append's commit, cancels it. Passes go on until one cancels
	// nothing; an append that comes later finds its dependencies
	// cancelled, and inserts its tasks cancelled.
	total := 0
	for pass := 0; ; pass++ {
		if pass == maxReleasePasses {
			return total, fmt.Errorf("pgqueue: cancel workflow %s: %w (%d passes)", id, ErrWorkflowGrowing, pass)
		}
		// A task's child workflows are cancelled with it, in its
		// transaction: a suspended parent awaiting one is cancelled here.
		var n int
		err := c.boundedTx(ctx, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, cancelWorkflowSQL, id)
			if err != nil {
				return err
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				return err
			}
			n = len(ids)
			return c.cancelChildren(ctx, tx, ids)
		})
		if err != nil {
			return total, fmt.Errorf("pgqueue: cancel workflow %s: %w", id, err)
		}
		if n == 0 {
			return total, nil
		}
		total += n
	}
}

// retryWorkflowSQL resumes workflow $1: its discarded and cancelled tasks
// run again, each once its dependencies have completed, with one more
// attempt if it had none left. Every reset task's dependencies are counted
// anew, and so are those of the tasks still pending (a task that runs
// anyway counted a failed dependency as ended, and that dependency now
// runs again). A task that runs only on a failure (RunOnFailure) counts
// as one that runs anyway, and forgets the failures it saw (they run
// again); one whose dependencies have all completed stays as it is (a
// compensation cancelled because nothing failed stays cancelled). One
// statement, its rows locked in ID order.
//
// A dependency counted here must release its dependent at its end: one
// whose dependents list holds the task does (retryWorkflowReleasesSQL
// then lets it release its whole list again); for one that does not (the
// task was appended: see addEdgesSQL), the task's edge to it is written
// again (ed), counted or not as counted here.
//
// transition: retry-final, release
const retryWorkflowSQL = `
WITH r AS MATERIALIZED (
    SELECT j.id, j.state FROM ` + workflowTaskRowsSQL + `
      AND j.state IN ('discarded', 'cancelled', 'pending')
    ORDER BY j.id
    FOR UPDATE OF j
), e AS MATERIALIZED (
    SELECT r.id, d.id AS dep, coalesce(r.id = ANY(d.dependents), false) AS listed,
           d.state IN ('discarded', 'cancelled', 'pending')
           OR (d.state NOT IN ('completed', 'discarded', 'cancelled') AND (t.run_anyway OR t.run_on_failure) IS TRUE)
           OR (d.state <> 'completed' AND (t.run_anyway OR t.run_on_failure) IS NOT TRUE) AS counts
    FROM r JOIN jobfence_jobs t ON t.id = r.id
    CROSS JOIN LATERAL unnest(t.depends_on) AS u(id) JOIN jobfence_jobs d ON d.id = u.id
), n AS MATERIALIZED (
    SELECT r.id, r.state AS was, (SELECT count(*) FROM e WHERE e.id = r.id AND e.counts)::int AS left,
           (SELECT t.run_on_failure FROM jobfence_jobs t WHERE t.id = r.id) IS TRUE AS rof
    FROM r
), ed AS (
    INSERT INTO jobfence_task_edges (dependency, dependent, counted)
    SELECT dep, id, counts FROM e WHERE NOT listed AND id NOT IN (SELECT id FROM n WHERE rof AND n.left = 0)
    ON CONFLICT (dependency, dependent) DO UPDATE SET counted = EXCLUDED.counted
), u AS (
    UPDATE jobfence_jobs j
    SET state = CASE WHEN n.left > 0 THEN 'pending' WHEN j.limit_name IS NOT NULL THEN 'limited' ELSE 'available' END,
        limit_slot = NULL,
        deps_left = n.left,
        scheduled_at = CASE WHEN n.was = 'pending' AND n.left > 0 THEN j.scheduled_at ELSE now() END,
        finalized_at = NULL,
        max_attempts = CASE WHEN n.was = 'pending' THEN j.max_attempts ELSE greatest(j.max_attempts, j.attempt + 1) END,
        dep_failed = CASE WHEN n.rof THEN false END
    FROM n
    WHERE j.id = n.id AND NOT (n.rof AND n.left = 0)
    RETURNING j.queue, j.state, n.was
)
SELECT count(*) FILTER (WHERE was <> 'pending'),
       coalesce(array_agg(DISTINCT queue) FILTER (WHERE state = 'available'), '{}')
FROM u`

// retryWorkflowReleasesSQL lets every task of workflow $1 that has not
// ended (after retryWorkflowSQL) release its whole dependents list at its
// end, whatever an earlier end released (dependents_released, see
// retrySet): retryWorkflowSQL has counted it anew in each pending
// dependent's deps_left.
var retryWorkflowReleasesSQL = `
UPDATE jobfence_jobs j SET dependents_released = NULL
FROM jobfence_workflow_tasks s
WHERE s.workflow_id = $1 AND j.id = s.job_id
  AND j.dependents_released IS NOT NULL AND j.state NOT IN ` + finalStatesSQL

// RetryWorkflow resumes workflow id: its discarded and cancelled tasks run
// again, each once the tasks it depends on have completed. It returns how
// many tasks it reset.
func (c *Client) RetryWorkflow(ctx context.Context, id string) (int, error) {
	if _, err := c.workflowRow(ctx, id); err != nil {
		return 0, err
	}
	var n int
	var queues []string
	tx, err := c.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: boundedBegin})
	if err != nil {
		return 0, fmt.Errorf("pgqueue: retry workflow %s: %w", id, err)
	}
	defer tx.Rollback(ctx)
	// Every task first, in ID order (the order a finish locks its jobs and
	// then their dependents, which have higher IDs): a dependency that
	// ends from now on waits for this transaction, and the count below,
	// a statement of its own, sees every end that did not wait.
	if _, err := tx.Exec(ctx, `SELECT FROM `+workflowTaskRowsSQL+` ORDER BY j.id FOR NO KEY UPDATE OF j`, id); err != nil {
		return 0, fmt.Errorf("pgqueue: retry workflow %s: %w", id, err)
	}
	if err := tx.QueryRow(ctx, retryWorkflowSQL, id).Scan(&n, &queues); err != nil {
		return 0, fmt.Errorf("pgqueue: retry workflow %s: %w", id, err)
	}
	if _, err := tx.Exec(ctx, retryWorkflowReleasesSQL, id); err != nil {
		return 0, fmt.Errorf("pgqueue: retry workflow %s: %w", id, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("pgqueue: retry workflow %s: commit: %w", id, err)
	}
	if len(queues) > 0 {
		c.wakeAfterCommit(ctx, queues)
	}
	return n, nil
}
