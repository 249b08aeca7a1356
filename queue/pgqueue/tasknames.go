package pgqueue

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/jobfence/jobfence/queue"
)

// A workflow's task names are kept in jobfence_workflow_tasks (migration
// 00022), one row per task, written once when the task is inserted and
// deleted with its workflow (pruneWorkflowsSQL). The jobs table has no
// index of them: a task's release, claim and completion are non-HOT
// updates, and each would write such an index again. The table's key
// keeps a name unique for the workflow's life, even once its task has
// been pruned. Every look-up by name, or of a workflow's tasks, goes
// through it and then probes the jobs' primary key.

// existingNamesSQL reads the names of a workflow's tasks, to refuse a
// task name used again, even one whose task has been pruned.
const existingNamesSQL = `SELECT task_name FROM jobfence_workflow_tasks WHERE workflow_id = $1 AND task_name = ANY($2::text[])`

// workflowTaskRowsSQL are the rows of workflow $1's tasks (as j), reached
// through their names: a probe of the jobs' primary key per task, none
// for a task pruned.
const workflowTaskRowsSQL = `jobfence_workflow_tasks s JOIN jobfence_jobs j ON j.id = s.job_id WHERE s.workflow_id = $1`

// existingTasksSQL reads the existing tasks that new tasks depend on, as
// this transaction's snapshot has them, and locks none: a caller's
// transaction (InsertWorkflowTx) that held a task's row until its commit
// would hold up the statements of the fleet that write it (the
// heartbeat, the completion, a rescue of the worker running it), with no
// bound. A task that ends after this read, before or after this insert's
// commit, releases the new tasks through their edges
// (addEdgesSQL, releaseAppendedSQL), once. A task pruned since is not
// found.
const existingTasksSQL = `
SELECT j.id, s.task_name, j.state
FROM jobfence_workflow_tasks s JOIN jobfence_jobs j ON j.id = s.job_id
WHERE s.workflow_id = $1 AND s.task_name = ANY($2::text[])`

// taskNamesConstraint is the key that an insert racing another's same
// name violates.
const taskNamesConstraint = "jobfence_workflow_tasks_pkey"

// copyTaskNames writes the names of workflow id's new tasks (names[i] is
// task ids[i]) in tx, in one COPY. A name that another transaction has
// given a task of the workflow meanwhile fails it with
// queue.ErrInvalidWorkflow (after that transaction's commit, which it
// waits for as a unique key does).
func copyTaskNames(ctx context.Context, tx pgx.Tx, id pgtype.UUID, names []string, ids []int64) error {
	rows := make([][]any, len(names))
	for i := range rows {
		rows[i] = []any{id, names[i], ids[i]}
	}
	_, err := tx.CopyFrom(ctx, pgx.Identifier{"jobfence_workflow_tasks"}, []string{"workflow_id", "task_name", "job_id"}, pgx.CopyFromRows(rows))
	switch {
	case uniqueViolation(err, taskNamesConstraint):
		return fmt.Errorf("%w: another insert has just given one of these names to a task of the workflow", queue.ErrInvalidWorkflow)
	case err != nil:
		return fmt.Errorf("copy names: %w", err)
	}
	return nil
}

// existingTask is a task a new one depends on.
type existingTask struct {
	id    int64
	state queue.State
}

// readExistingTasks reads the named tasks of workflow id (see
// existingTasksSQL).
func readExistingTasks(ctx context.Context, tx pgx.Tx, id pgtype.UUID, names []string) (map[string]existingTask, error) {
	out := map[string]existingTask{}
	if len(names) == 0 {
		return out, nil
	}
	rows, err := tx.Query(ctx, existingTasksSQL, id, names)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var e existingTask
		var name, state string
		if err := rows.Scan(&e.id, &name, &state); err != nil {
			return nil, err
		}
		e.state = queue.State(state)
		out[name] = e
	}
	return out, rows.Err()
}
