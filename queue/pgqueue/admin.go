package pgqueue

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobfence/jobfence/queue"
)

// getSQL reads job $1 where it is: in jobfence_jobs, or completed in
// jobfence_jobs_finished (one statement, one snapshot: a job moving
// between the two is found once).
// Its last columns are the job's progress (queue.Job.Progress) and its
// attempts' logs (queue.Job.Logs), which only reads of one job carry:
// claims do not read them.
const getSQL = `SELECT ` + listColumns + `, j.progress, ` + logsColumn + ` FROM jobfence_jobs j WHERE j.id = $1
UNION ALL
SELECT ` + listColumns + `, j.progress, ` + logsColumn + ` FROM jobfence_jobs_finished j WHERE j.id = $1
LIMIT 1`

// listColumns are the columns Get and List read: jobColumns and the
// job's tags, which a claim does not read (see queue.Job.Tags).
const listColumns = jobColumns + `, j.tags`

// scanListed reads a row of listColumns, then into more.
func scanListed(row pgx.Row, more ...any) (*queue.Job, error) {
	var tags []string
	j, err := scanJob(row, append([]any{&tags}, more...)...)
	if err != nil {
		return nil, err
	}
	j.Tags = tags
	return j, nil
}

// scanListedJobs reads every row of listColumns.
func scanListedJobs(rows pgx.Rows) ([]*queue.Job, error) {
	defer rows.Close()
	var jobs []*queue.Job
	for rows.Next() {
		j, err := scanListed(rows)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, rows.Err()
}

// allJobsSQL is every job, in jobfence_jobs and in jobfence_jobs_finished,
// with every column of both: a simple UNION ALL, which the planner reads
// as one relation, so that a filter and an ORDER BY id ... LIMIT reach
// each table's indexes.
const allJobsSQL = `(SELECT state, finalized_at, lease_expires_at, output, ` + finishedColumns + ` FROM jobfence_jobs
    UNION ALL
    SELECT state, finalized_at, lease_expires_at, output, ` + finishedColumns + ` FROM jobfence_jobs_finished)`

// Get returns the stored job id, or an error wrapping queue.ErrJobNotFound.
func (c *Client) Get(ctx context.Context, id int64) (*queue.Job, error) {
	j, err := scanGot(c.pool.QueryRow(ctx, getSQL, id), id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("pgqueue: job %d: %w", id, queue.ErrJobNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("pgqueue: get job %d: %w", id, err)
	}
	return j, nil
}

// scanGot scans job id's row as getSQL reads it: the listed columns, its
// progress and its stored logs. Get and AwaitJob read it.
func scanGot(row pgx.Row, id int64) (*queue.Job, error) {
	var progress, logs []byte
	j, err := scanListed(row, &progress, &logs)
	if err != nil {
		return nil, err
	}
	if progress != nil {
		j.Progress = progress
	}
	if j.Logs, err = decodeLogs(id, logs); err != nil {
		return nil, err
	}
	return j, nil
}

// cancelSQL cancels job $1 unless it has finished, and tells its worker
// (cancelChannel, "<id>:<fence>", as cancelPayload writes it) in the same
// statement: the notification goes out when, and only if, the change
// commits. One statement in its own transaction, the cancel holds the
// job's row only while the server runs it: a client frozen after sending
// it leaves nothing locked, where one frozen inside a transaction would
// hold the row (a heartbeat, the worker's outcome and the rescuer would
// wait or skip it) for as long as it stayed frozen.
//
// The same statement cancels the child workflows the job started
// (workflow.StartChild), and theirs in turn, 64 generations deep at most:
// every task of theirs that has not ended, running ones told as the job
// is, locked in ID order (as a finish locks its task, then its
// dependents). A plain job without children pays one probe of the
// partial index of parents (migration 00032).
//
// transition: cancel, cancel-waiting
var cancelSQL = `
WITH RECURSIVE c AS (
    UPDATE jobfence_jobs
    SET state = 'cancelled', finalized_at = now(), lease_expires_at = NULL,
        errors = errors || jsonb_build_array(jsonb_build_object('attempt', attempt, 'at', now(), 'error', 'cancelled by request'))
    WHERE id = $1 AND state NOT IN ('completed', 'discarded', 'cancelled')
    RETURNING id, fence
), d(id, depth) AS (
    SELECT s.job_id, 1 FROM c
    JOIN jobfence_workflows w ON w.parent_job_id = c.id
    JOIN jobfence_workflow_tasks s ON s.workflow_id = w.id
  UNION
    SELECT s.job_id, d.depth + 1 FROM d
    JOIN jobfence_workflows w ON w.parent_job_id = d.id
    JOIN jobfence_workflow_tasks s ON s.workflow_id = w.id
    WHERE d.depth < 64
), l AS MATERIALIZED (
    SELECT j.id FROM jobfence_jobs j
    WHERE j.id IN (SELECT id FROM d) AND j.state NOT IN ` + finalStatesSQL + `
    ORDER BY j.id
    FOR UPDATE OF j
), k AS (
    UPDATE jobfence_jobs j
    SET state = 'cancelled', finalized_at = now(), lease_expires_at = NULL,
        errors = j.errors || jsonb_build_array(jsonb_build_object('attempt', j.attempt, 'at', now(),
            'error', 'cancelled by request: its parent job was cancelled'))
    FROM l
    WHERE j.id = l.id AND j.state NOT IN ` + finalStatesSQL + `
    RETURNING j.id, j.fence
)
SELECT pg_notify($2, id::text || ':' || fence::text) FROM c
UNION ALL
SELECT pg_notify($2, id::text || ':' || fence::text) FROM k`

// Cancel cancels a job that has not finished. A running job's worker is
// told at once (NOTIFY) and cancels the handler's context; whatever that
// handler reports afterwards is stale. Cancelling a final job returns an
// error naming its state; an unknown ID wraps queue.ErrJobNotFound.
//
// A workflow task's pending dependents are cancelled with it, in the same
// transaction (see releaseSQL), a bounded one (see finishBatch), and so
// are the child workflows the job started (workflow.StartChild), every
// task of theirs that has not ended, running ones through their workers,
// and their children in turn, by cancelSQL itself. The job
// is read first to tell a task from another job; a failed read fails the
// cancel, which changes nothing then: taken for a plain job, a task was
// cancelled without its release, and a dependent that runs anyway waited
// for it for ever (the model test, seed 9119).
func (c *Client) Cancel(ctx context.Context, id int64) error {
	j, err := c.Get(ctx, id)
	if err != nil {
		return fmt.Errorf("pgqueue: cancel job %d: %w", id, err)
	}
	if j.WorkflowID != "" {
		err = c.boundedTx(ctx, func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, cancelSQL, id, cancelChannel).Scan(nil); err != nil {
				return err
			}
			return c.releaseFailed(ctx, tx, []int64{id})
		})
	} else {
		err = c.pool.QueryRow(ctx, cancelSQL, id, cancelChannel).Scan(nil)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		j, gerr := c.Get(ctx, id)
		if gerr != nil {
			return gerr
		}
		return fmt.Errorf("pgqueue: cancel job %d: it is already %s", id, j.State)
	}
	if err != nil {
		return fmt.Errorf("pgqueue: cancel job %d: %w", id, err)
	}
	return nil
}

// ErrJobCompleted reports a Retry of a completed job: it ran successfully
// already, and running it again would repeat its effects (a payment, an
// email). RetryForce runs it again anyway.
var ErrJobCompleted = errors.New("jobfence: the job completed already; retrying it would run it again")

// ErrUniqueHeld reports a Retry of a job with UniqueOpts whose unique key
// another job holds now (an unfinished duplicate inserted after this one
// finished): running this one again beside it would run the duplicate the
// key refused. Retry it after the other has finished, or delete one.
var ErrUniqueHeld = errors.New("jobfence: another job holds the job's unique key; retrying it would run a duplicate")

// uniqueHeld reports whether err is a retry's breach of the computed
// unique key's index (migration 00012).
func uniqueHeld(err error) bool { return uniqueViolation(err, "jobfence_jobs_unique_hash") }

// uniqueViolation reports whether err is a breach of the unique index or
// key named constraint.
func uniqueViolation(err error, constraint string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == constraint
}

// retrySet makes a job ready now, with one more attempt if it had none
// left: what Retry and RetryMatching do to each job.
//
// A job a limit governs waits for a slot again (limited), its old one
// given back: the workers' next grant pass (GrantWaiting) hands it one,
// oldest job first, so a retried job of a sequence goes before the
// later ones.
//
// A workflow task that had ended released its dependents then, every one
// its list holds now: dependents_released records how many, and its next
// end releases only those appended after (releaseClosure's off), so a
// fan-in does not count it twice.
var retrySet = `state = ` + readySQL("limit_name") + `, limit_slot = NULL,
    scheduled_at = now(), finalized_at = NULL,
    max_attempts = greatest(max_attempts, attempt + 1),
    dependents_released = CASE WHEN state IN ` + finalStatesSQL + ` THEN cardinality(dependents)
                               ELSE dependents_released END`

// retrySQL makes job $1 ready now unless it is running, or completed and $2
// (force) is false, and wakes its queue's workers (channel $3) in the same
// statement, so that a client frozen right after sending it holds nothing
// back: neither the row nor the wake-up. A completed job run again
// forgets its recorded steps (RetryForce runs it from the top); any
// other keeps them, and resumes at its first unrecorded step.
//
// transition: retry-final
var retrySQL = `
WITH o AS (
    SELECT state = 'completed' AS completed FROM jobfence_jobs WHERE id = $1
), r AS (
    UPDATE jobfence_jobs
    SET ` + retrySet + `
    WHERE id = $1 AND state NOT IN ('running', 'pending') AND ($2 OR state <> 'completed')
      AND coalesce(deps_left, 0) = 0
    RETURNING queue
), s AS (
    DELETE FROM jobfence_steps
    WHERE job_id = $1 AND EXISTS (SELECT FROM r) AND (SELECT completed FROM o)
)
SELECT pg_notify($3, queue) FROM r`

// retryFinishedSQL moves job $1 back from jobfence_jobs_finished into
// jobfence_jobs, with its ID, ready now with one more attempt if it had
// none left, and wakes its queue's workers (channel $2): one statement,
// so the job is in one table or the other, its recorded steps forgotten
// (it completed: it runs from the top). Its next claim draws a new
// fence, greater than every fence before. A job with UniqueOpts whose key
// another job holds now breaches the key's index, as in retrySQL.
//
// transition: retry-final
const retryFinishedSQL = `
WITH m AS (
    DELETE FROM jobfence_jobs_finished WHERE id = $1 RETURNING *
), s AS (
    DELETE FROM jobfence_steps WHERE job_id = $1 AND EXISTS (SELECT FROM m)
), r AS (
    INSERT INTO jobfence_jobs (state, finalized_at, lease_expires_at, output, run_trace, ` + finishedColumns + `)
    OVERRIDING SYSTEM VALUE
    SELECT 'available', NULL, NULL, output, run_trace, id, queue, kind, args, priority, now(), attempt, greatest(max_attempts, attempt + 1),
        fence, unique_key, errors, attempted_by, created_at, attempted_at, metadata, trace_context, idempotency_key, deadline,
        timeout_us, unique_hash, unique_states, limit_name, limit_part, NULL, workflow_id, task_name, depends_on, dependents,
        deps_left, run_anyway, delete_on_complete, cardinality(dependents), run_on_failure, dep_failed, NULL, awaited, progress, tags, limit_fair
    FROM m
    RETURNING queue
)
SELECT pg_notify($2, queue) FROM r`

// Retry makes a job that is not running ready to run now, giving it one
// more attempt if it had none left: the way back for a discarded or
// cancelled job. It refuses a completed job with an error wrapping
// ErrJobCompleted, because a mistaken retry must not repeat what the job
// did (see RetryForce), and a workflow task that its dependencies have
// not released (pending, or cancelled before they did) with one wrapping
// ErrDependenciesPending, because it would run before them.
func (c *Client) Retry(ctx context.Context, id int64) error {
	return c.retry(ctx, id, false)
}

// RetryForce is Retry that also runs a completed job again, for when its
// effects must happen again (they were lost or undone).
func (c *Client) RetryForce(ctx context.Context, id int64) error {
	return c.retry(ctx, id, true)
}

func (c *Client) retry(ctx context.Context, id int64, force bool) error {
	err := c.pool.QueryRow(ctx, retrySQL, id, force, insertChannel).Scan(nil)
	if errors.Is(err, pgx.ErrNoRows) && force {
		err = c.pool.QueryRow(ctx, retryFinishedSQL, id, insertChannel).Scan(nil)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		j, gerr := c.Get(ctx, id)
		if gerr != nil {
			return gerr
		}
		if j.State == queue.StateCompleted {
			return fmt.Errorf("pgqueue: retry job %d: %w", id, ErrJobCompleted)
		}
		if j.State == queue.StatePending || j.State != queue.StateRunning && c.dependenciesLeft(ctx, id) {
			return fmt.Errorf("pgqueue: retry job %d: %w", id, ErrDependenciesPending)
		}
		return fmt.Errorf("pgqueue: retry job %d: it is %s", id, j.State)
	}
	if uniqueHeld(err) {
		return fmt.Errorf("pgqueue: retry job %d: %w", id, ErrUniqueHeld)
	}
	if err != nil {
		return fmt.Errorf("pgqueue: retry job %d: %w", id, err)
	}
	return nil
}

// dependenciesLeft says whether job id is a workflow task that some of its
// dependencies have not released (deps_left > 0).
func (c *Client) dependenciesLeft(ctx context.Context, id int64) bool {
	var left bool
	err := c.pool.QueryRow(ctx, `SELECT coalesce(deps_left, 0) > 0 FROM jobfence_jobs WHERE id = $1`, id).Scan(&left)
	return err == nil && left
}

// ErrDependenciesPending reports a Retry of a workflow task that its
// dependencies have not released: one still pending, or one cancelled or
// discarded before they did (a cancel, a failed dependency). Made ready,
// it would run before them. A pending task runs once they release it;
// RetryWorkflow retries a workflow's failed tasks with their
// dependencies, counting them again.
var ErrDependenciesPending = errors.New("jobfence: the workflow task's dependencies have not released it; it would run before them (RetryWorkflow retries it with them)")

// ErrJobRunning reports a Delete of a running job: its worker still holds
// it, and deleting the row would leave that worker's outcome nowhere to go.
// Cancel it first.
var ErrJobRunning = errors.New("jobfence: the job is running; cancel it first")

const deleteSQL = `DELETE FROM jobfence_jobs WHERE id = ANY($1::bigint[]) AND state <> 'running' RETURNING id, queue`

// cancelDeletedTasksSQL cancels the unfinished workflow tasks among $1
// that have dependents, just before their delete in the same
// transaction, so that releaseSQL (between the two) applies the failure
// policy to their dependents, as a cancel does: a deleted task's
// dependents are cancelled with the reason, or run anyway, rather than
// left pending for good. A finished task's dependents were released or
// cancelled when it finished.
//
// transition: cancel-waiting
const cancelDeletedTasksSQL = `
UPDATE jobfence_jobs SET state = 'cancelled', finalized_at = now()
WHERE id = ANY($1::bigint[]) AND dependents IS NOT NULL
  AND state IN ('available', 'scheduled', 'retryable', 'limited', 'pending')
RETURNING id`

// deleteJobs deletes the jobs among ids that are not running, in tx,
// after cancelling the dependents of the workflow tasks among them (see
// cancelDeletedTasksSQL), and returns the IDs and queues it deleted.
func (c *Client) deleteJobs(ctx context.Context, tx pgx.Tx, ids []int64) (deleted []int64, queues []string, err error) {
	rows, err := tx.Query(ctx, cancelDeletedTasksSQL, ids)
	if err != nil {
		return nil, nil, err
	}
	tasks, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, nil, err
	}
	if len(tasks) > 0 {
		if err := c.releaseFailed(ctx, tx, tasks); err != nil {
			return nil, nil, fmt.Errorf("cancel the dependents of deleted tasks: %w", err)
		}
	}
	rows, err = tx.Query(ctx, deleteSQL, ids)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var q string
		if err := rows.Scan(&id, &q); err != nil {
			return nil, nil, err
		}
		deleted = append(deleted, id)
		if !slices.Contains(queues, q) {
			queues = append(queues, q)
		}
	}
	return deleted, queues, rows.Err()
}

// deleteFinishedSQL deletes job $1 from jobfence_jobs_finished, where a
// completed job moves (see leavesSQL).
const deleteFinishedSQL = `DELETE FROM jobfence_jobs_finished WHERE id = $1`

// Delete removes a job that is not running, whatever its state; its unique
// key, if any, is free again. A running job is refused with an error
// wrapping ErrJobRunning; an unknown ID wraps queue.ErrJobNotFound. A
// workflow task deleted before it finished cancels its pending
// dependents (unless they run anyway), as Cancel does, in the same
// transaction, a bounded one (see finishBatch).
func (c *Client) Delete(ctx context.Context, id int64) error {
	var deleted []int64
	err := c.boundedTx(ctx, func(tx pgx.Tx) error {
		var err error
		deleted, _, err = c.deleteJobs(ctx, tx, []int64{id})
		return err
	})
	if err == nil && len(deleted) == 0 {
		// Completed, it may have moved to the finished table.
		tag, ferr := c.pool.Exec(ctx, deleteFinishedSQL, id)
		if ferr != nil {
			return fmt.Errorf("pgqueue: delete job %d: %w", id, ferr)
		}
		if tag.RowsAffected() == 1 {
			return nil
		}
		if _, gerr := c.Get(ctx, id); gerr != nil {
			return gerr
		}
		return fmt.Errorf("pgqueue: delete job %d: %w", id, ErrJobRunning)
	}
	if err != nil {
		return fmt.Errorf("pgqueue: delete job %d: %w", id, err)
	}
	return nil
}

const countSQL = `SELECT state, count(*) FROM ` + allJobsSQL + ` j WHERE ($1 = '' OR queue = $1) GROUP BY state`

// Counts returns how many jobs of queue q (all queues when empty) are in
// each state, completed ones in jobfence_jobs_finished included: it reads
// every job, so it suits tests and small tables; Queues counts with a cap.
func (c *Client) Counts(ctx context.Context, q string) (map[queue.State]int64, error) {
	rows, err := c.pool.Query(ctx, countSQL, q)
	if err != nil {
		return nil, fmt.Errorf("pgqueue: counts: %w", err)
	}
	defer rows.Close()
	out := map[queue.State]int64{}
	for rows.Next() {
		var s string
		var n int64
		if err := rows.Scan(&s, &n); err != nil {
			return nil, fmt.Errorf("pgqueue: counts: %w", err)
		}
		out[queue.State(s)] = n
	}
	return out, rows.Err()
}
