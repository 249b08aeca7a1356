// Package workflow runs DAGs of jobs: tasks, each a job with typed
// arguments and a name, that run once the tasks they depend on have
// completed, and read those tasks' outputs.
//
// Every task is a job claimed under SKIP LOCKED and run by an ordinary
// worker handler. A task waiting for its dependencies is 'pending', a
// state no claim reads; the fenced completion of its last dependency makes
// it available, in the same transaction as that completion, so a zombie
// attempt of a dependency (one whose lease ran out and whose job another
// attempt finished) can neither release its dependents nor overwrite its
// output. No leader or scheduler is involved. A task whose dependency was
// discarded or cancelled is cancelled with the reason, unless it runs
// anyway (TaskOpts.RunAnyway); a compensation (TaskOpts.RunOnFailure)
// runs only in that case. A batch (NewBatch) is a workflow of members
// and a callback that runs once they have all ended.
//
// Workflows need the PostgreSQL backend (pgqueue); see docs/workflows.md.
package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/worker"
)

// Errors of the backend, re-exported where a workflow user looks.
var (
	// ErrUnsupported reports a backend that cannot run workflows
	// (kafkaqueue).
	ErrUnsupported = queue.ErrWorkflowsUnsupported
	// ErrInvalid wraps what is wrong with a workflow that cannot be
	// inserted: a task without a name or named twice, a dependency on a
	// task the workflow lacks, a cycle.
	ErrInvalid = queue.ErrInvalidWorkflow
	// ErrNotFound reports a workflow ID that names no workflow.
	ErrNotFound = queue.ErrWorkflowNotFound
	// ErrNoOutput is wrapped by Output's error for a dependency that did
	// not complete (a task that runs anyway) or recorded no output.
	ErrNoOutput = queue.ErrNoOutput
	// ErrNotAncestor is wrapped by Output's error for a task that is not
	// among the caller's ancestors (its dependencies, theirs, and so on):
	// a sibling, a later task, a name the workflow lacks.
	ErrNotAncestor = queue.ErrNotAncestor
	// ErrNotDependency is ErrNotAncestor, by its former name.
	//
	// Deprecated: use ErrNotAncestor.
	ErrNotDependency = queue.ErrNotDependency
)

// ErrNotATask is wrapped by the error of Output and ID called from a
// context that is not a workflow task's handler.
var ErrNotATask = errors.New("jobfence: not a workflow task's handler")

// TaskOpts tunes one task.
type TaskOpts struct {
	// DependsOn names the tasks that must complete before this one runs.
	DependsOn []string
	// RunAnyway runs the task once its dependencies have ended, even if
	// one was discarded or cancelled (Output then returns ErrNoOutput
	// for it). By default such a task is cancelled, with the reason.
	RunAnyway bool
	// RunOnFailure makes the task a compensation (a saga's refund): it
	// runs once its dependencies have ended only if at least one was
	// discarded or cancelled. If all of them completed, it is cancelled
	// with the reason "no dependency failed", and its dependents are
	// treated as that cancel implies (cancelled, unless they run anyway
	// or on a failure). It needs DependsOn and excludes RunAnyway: Insert
	// refuses either with an error wrapping ErrInvalid.
	RunOnFailure bool
	// Insert sets the task's job options (queue, priority, attempts,
	// timeout...); nil takes the args type's defaults. UniqueKey must be
	// empty.
	Insert *queue.InsertOpts
}

// Workflow is a workflow being built: Add its tasks, then Insert it.
type Workflow struct {
	id    string
	name  string
	tasks []queue.WorkflowTask
	err   error
}

// New starts a workflow named name (a description for listings; it need
// not be unique).
func New(name string) *Workflow { return &Workflow{name: name} }

// Append starts a set of tasks to add to the existing workflow id, while
// it runs: the new tasks may depend on each other and on the workflow's
// tasks, whatever their state (a completed dependency counts as done).
// From a task's handler, ID(ctx) is its workflow's ID.
func Append(id string) *Workflow { return &Workflow{id: id} }

// Add adds a task named name, running args's kind, and returns w. An
// args value that does not encode is reported by Insert.
func (w *Workflow) Add(name string, args queue.Args, opts *TaskOpts) *Workflow {
	if opts == nil {
		opts = &TaskOpts{}
	}
	p, err := queue.Params(args, opts.Insert)
	if err != nil && w.err == nil {
		w.err = fmt.Errorf("task %q: %w", name, err)
	}
	w.tasks = append(w.tasks, queue.WorkflowTask{Name: name, Params: p, DependsOn: opts.DependsOn,
		RunAnyway: opts.RunAnyway, RunOnFailure: opts.RunOnFailure})
	return w
}

// Params returns the workflow as the backend takes it.
func (w *Workflow) Params() (queue.WorkflowParams, error) {
	if w.err != nil {
		return queue.WorkflowParams{}, fmt.Errorf("workflow: %w", w.err)
	}
	return queue.WorkflowParams{ID: w.id, Name: w.name, Tasks: w.tasks}, nil
}

// Insert inserts w in one transaction of its own: every task or none. It
// returns the workflow's ID and each task's job ID. A backend that cannot
// run workflows (kafkaqueue) returns an error wrapping ErrUnsupported.
func Insert(ctx context.Context, b queue.WorkflowInserter, w *Workflow) (queue.WorkflowResult, error) {
	p, err := w.Params()
	if err != nil {
		return queue.WorkflowResult{}, err
	}
	return b.InsertWorkflow(ctx, p)
}

// TxInserter is a backend that inserts workflows in the caller's
// transaction (pgqueue.Client).
type TxInserter interface {
	InsertWorkflowTx(ctx context.Context, tx pgx.Tx, p queue.WorkflowParams) (queue.WorkflowResult, error)
}

// InsertTx is Insert inside the caller's transaction tx: the workflow
// exists only if tx commits.
func InsertTx(ctx context.Context, b TxInserter, tx pgx.Tx, w *Workflow) (queue.WorkflowResult, error) {
	p, err := w.Params()
	if err != nil {
		return queue.WorkflowResult{}, err
	}
	return b.InsertWorkflowTx(ctx, tx, p)
}

// OutputReader is a backend that reads a task's output for a dependent
// (pgqueue.Client).
type OutputReader interface {
	TaskOutput(ctx context.Context, job int64, name string) (json.RawMessage, error)
}

// Output returns, decoded into T, the output recorded
// (worker.RecordOutput) by the task named name, which must be an ancestor
// of the task whose handler's context ctx is: a task it depends on,
// directly or through others. It returns an error wrapping ErrNoOutput if
// that task did not complete (this task runs anyway) or recorded nothing,
// and ErrNotATask outside a workflow task's handler.
//
// For a task that is not an ancestor (a sibling, a later task, a name the
// workflow lacks) its error wraps ErrNotAncestor and is final: returned
// by the handler, it cancels the job (worker.JobCancel) with the message
// recorded, having spent one attempt, rather than retry what cannot
// succeed. Such a mistake cannot be refused at insert: the names a
// handler reads are known only as it runs.
func Output[T any](ctx context.Context, name string) (T, error) {
	var v T
	job := worker.JobFromContext(ctx)
	if job == nil || job.WorkflowID == "" {
		return v, fmt.Errorf("workflow: output of %q: %w", name, ErrNotATask)
	}
	r, ok := worker.BackendFromContext(ctx).(OutputReader)
	if !ok {
		return v, fmt.Errorf("workflow: output of %q: %w", name, ErrUnsupported)
	}
	raw, err := r.TaskOutput(ctx, job.ID, name)
	if errors.Is(err, ErrNotAncestor) {
		return v, worker.JobCancel(fmt.Errorf("workflow: %w", err))
	}
	if err != nil {
		return v, fmt.Errorf("workflow: %w", err)
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, fmt.Errorf("workflow: output of %q does not decode into %T: %w", name, v, err)
	}
	return v, nil
}

// ID returns the ID of the workflow whose task's handler ctx is, for
// Append, or an error wrapping ErrNotATask.
func ID(ctx context.Context) (string, error) {
	job := worker.JobFromContext(ctx)
	if job == nil || job.WorkflowID == "" {
		return "", fmt.Errorf("workflow: %w", ErrNotATask)
	}
	return job.WorkflowID, nil
}
