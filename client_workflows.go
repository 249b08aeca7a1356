package jobfence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/workflow"
)

// The types of the workflow methods; each is the type of the package
// underneath, not a copy.
type (
	// WorkflowResult is what InsertWorkflow did: the workflow's ID and
	// each inserted task's job ID, by task name. See queue.WorkflowResult.
	WorkflowResult = queue.WorkflowResult

	// WorkflowInfo is a workflow and how far it has come: its tasks
	// counted by state (Total, Done) and, from Workflows().Get, the tasks
	// themselves. See pgqueue.WorkflowInfo.
	WorkflowInfo = pgqueue.WorkflowInfo

	// ChildWorkflow is a workflow that a job started from its handler
	// (workflow.StartChild): its ID, name and parent job. See
	// pgqueue.ChildWorkflow.
	ChildWorkflow = pgqueue.ChildWorkflow
)

// ErrWorkflowNotFound reports a workflow ID that names no workflow (an
// Append to it, Workflows().Get, Cancel, Retry).
var ErrWorkflowNotFound = workflow.ErrNotFound

// errNoWorkflowID reports an empty workflow ID given to a Workflows method.
var errNoWorkflowID = errors.New("a workflow ID is required")

// InsertWorkflow inserts wf (workflow.New, then Add its tasks) in one
// transaction of its own, every task or none, and wakes the workers of the
// queues whose tasks are ready. It returns the workflow's ID and each
// task's job ID. wf may be workflow.Append(id): its tasks join the
// running workflow id, and may depend on its tasks. A workflow that
// cannot be inserted (a task without a name, a dependency on a task it
// lacks, a cycle) is an error wrapping workflow.ErrInvalid.
func (c *Client) InsertWorkflow(ctx context.Context, wf *workflow.Workflow) (WorkflowResult, error) {
	if wf == nil {
		return WorkflowResult{}, errors.New("jobfence: insert workflow: nil workflow")
	}
	r, err := workflow.Insert(ctx, c.pg, wf)
	if err != nil {
		return r, fmt.Errorf("jobfence: insert workflow: %w", err)
	}
	return r, nil
}

// InsertWorkflowTx is InsertWorkflow inside the caller's transaction: the
// workflow exists, and workers are woken, only if tx commits.
func (c *Client) InsertWorkflowTx(ctx context.Context, tx pgx.Tx, wf *workflow.Workflow) (WorkflowResult, error) {
	if wf == nil {
		return WorkflowResult{}, errors.New("jobfence: insert workflow: nil workflow")
	}
	r, err := workflow.InsertTx(ctx, c.pg, tx, wf)
	if err != nil {
		return r, fmt.Errorf("jobfence: insert workflow: %w", err)
	}
	return r, nil
}

// BatchResult is what InsertBatch did: the batch's workflow ID, its
// members' job IDs in order, its callback's. See workflow.BatchResult.
type BatchResult = workflow.BatchResult

// InsertBatch inserts b (workflow.NewBatch, its members added, its
// callback set with OnComplete) in one transaction of its own, every job
// or none: the callback runs once, when every member has ended, and
// reads how each ended with workflow.BatchMembers. A batch without
// members or callback is an error wrapping workflow.ErrInvalid.
func (c *Client) InsertBatch(ctx context.Context, b *workflow.Batch) (BatchResult, error) {
	r, err := workflow.InsertBatch(ctx, c.pg, b)
	if err != nil {
		return r, fmt.Errorf("jobfence: insert batch: %w", err)
	}
	return r, nil
}

// InsertBatchTx is InsertBatch inside the caller's transaction: the batch
// exists only if tx commits.
func (c *Client) InsertBatchTx(ctx context.Context, tx pgx.Tx, b *workflow.Batch) (BatchResult, error) {
	r, err := workflow.InsertBatchTx(ctx, c.pg, tx, b)
	if err != nil {
		return r, fmt.Errorf("jobfence: insert batch: %w", err)
	}
	return r, nil
}

// Workflows returns the handle on the stored workflows: read, list,
// cancel and retry them. Every client has it, insert-only included.
func (c *Client) Workflows() Workflows { return Workflows{c: c} }

// Workflows reads and changes the stored workflows through a Client
// (Client.Workflows); the methods pass to the pgqueue.Client's.
type Workflows struct{ c *Client }

// WorkflowListParams pages through Workflows().List.
type WorkflowListParams struct {
	// Before lists the workflows created before it; zero lists from the
	// newest.
	Before time.Time
	// Limit is how many workflows to list; zero or less means 100.
	Limit int
}

// Get returns workflow id with its tasks, or an error wrapping
// ErrWorkflowNotFound.
func (w Workflows) Get(ctx context.Context, id string) (*WorkflowInfo, error) {
	if id == "" {
		return nil, fmt.Errorf("jobfence: get workflow: %w", errNoWorkflowID)
	}
	return w.c.pg.Workflow(ctx, id)
}

// List returns the newest p.Limit workflows created before p.Before,
// newest first, each with its tasks counted by state (not listed: Get
// lists them).
func (w Workflows) List(ctx context.Context, p WorkflowListParams) ([]*WorkflowInfo, error) {
	return w.c.pg.ListWorkflows(ctx, p.Before, p.Limit)
}

// Cancel cancels every task of workflow id that has not started, and
// returns how many; running tasks run to their end. An unknown ID wraps
// ErrWorkflowNotFound.
func (w Workflows) Cancel(ctx context.Context, id string) (int, error) {
	if id == "" {
		return 0, fmt.Errorf("jobfence: cancel workflow: %w", errNoWorkflowID)
	}
	return w.c.pg.CancelWorkflow(ctx, id)
}

// Retry resumes workflow id: its discarded and cancelled tasks run again,
// each once the tasks it depends on have completed. It returns how many
// tasks it reset. An unknown ID wraps ErrWorkflowNotFound.
func (w Workflows) Retry(ctx context.Context, id string) (int, error) {
	if id == "" {
		return 0, fmt.Errorf("jobfence: retry workflow: %w", errNoWorkflowID)
	}
	return w.c.pg.RetryWorkflow(ctx, id)
}

// Children returns the child workflows that job id started from its
// handler (workflow.StartChild), oldest first, 1,000 at most; a
// workflow's own parent is its WorkflowInfo's ParentJobID, and the
// children of its tasks its Children (from Get).
func (w Workflows) Children(ctx context.Context, id int64) ([]ChildWorkflow, error) {
	return w.c.pg.ChildWorkflows(ctx, id)
}
