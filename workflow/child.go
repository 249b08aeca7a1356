package workflow

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// Child workflows (docs/durable.md, "Child workflows"): a job's handler
// (a workflow task's or any job's) starts a workflow as a step of its own
// (StartChild) and awaits it as it awaits a signal (AwaitChild), without
// holding a worker while it waits. Start and await are two calls, not
// one, so that a handler can start several children and then await each:
// a fan-out whose children run side by side.

// Errors of child workflows.
var (
	// ErrChildFailed is wrapped by AwaitChild's error when the child
	// workflow ended with a task discarded or cancelled; the workflow's
	// summary comes with it.
	ErrChildFailed = errors.New("jobfence: the child workflow ended with a task discarded or cancelled")
	// ErrNotChild is wrapped by AwaitChild's error for a workflow that the
	// job did not start.
	ErrNotChild = pgqueue.ErrNotChild
	// ErrNotInHandler is wrapped by the error of StartChild and AwaitChild
	// called with a context that is not a job handler's.
	ErrNotInHandler = worker.ErrNotInHandler
)

// ChildBackend is what StartChild and AwaitChild need of the job's
// backend: pgqueue.Client has it.
type ChildBackend interface {
	queue.WorkflowInserter
	ChildEnded(ctx context.Context, parent int64, id string) (bool, error)
	Workflow(ctx context.Context, id string) (*pgqueue.WorkflowInfo, error)
}

// childOf returns the running job and its backend, or the error.
func childOf(ctx context.Context, what string) (*queue.Job, ChildBackend, error) {
	job := worker.JobFromContext(ctx)
	if job == nil {
		return nil, nil, fmt.Errorf("workflow: %s: %w", what, ErrNotInHandler)
	}
	b, ok := worker.BackendFromContext(ctx).(ChildBackend)
	if !ok {
		return nil, nil, fmt.Errorf("workflow: %s of job %d: %w", what, job.ID, ErrUnsupported)
	}
	return job, b, nil
}

// StartChild inserts w as a child workflow of the job whose handler's
// context ctx is, and returns its ID. It is a step of the job
// (worker.Step): it runs once across the job's attempts, and a later
// attempt (a retry, a rescue, a resumption) gets the same ID without
// inserting again. The insert itself is idempotent too: the workflow's ID
// is derived from the step's key (worker.StepKey: the job's idempotency
// key and the step's place among the job's steps), so an attempt that
// crashed after the insert and before its record finds the workflow on
// its next attempt instead of inserting a second one. The insert applies
// only while the attempt holds its claim (its fence): a stale attempt's
// fails with an error wrapping queue.ErrStaleFence.
//
// Cancelling the job (Client.Cancel, or a Workflows().Cancel that cancels
// it) cancels the child workflow, running tasks included, and the
// children of its tasks. w must be a new workflow (New), not an Append.
func StartChild(ctx context.Context, w *Workflow) (string, error) {
	job, b, err := childOf(ctx, "start child")
	if err != nil {
		return "", err
	}
	if w == nil {
		return "", fmt.Errorf("workflow: start child of job %d: nil workflow", job.ID)
	}
	if w.id != "" {
		return "", fmt.Errorf("workflow: start child of job %d: %w: a child workflow is a new one (New), not an Append", job.ID, ErrInvalid)
	}
	p, err := w.Params()
	if err != nil {
		return "", err
	}
	lease := job.Lease()
	return worker.SystemStep(ctx, "child", func(ctx context.Context) (string, error) {
		p.ID, p.Parent = childID(worker.StepKey(ctx)), lease
		r, err := b.InsertWorkflow(ctx, p)
		if err != nil {
			return "", fmt.Errorf("workflow: start child %q of job %d: %w", p.Name, job.ID, err)
		}
		return r.ID, nil
	})
}

// childID derives a workflow ID from a step's key: the first 16 bytes of
// its SHA-256, as a UUID of version 8 (custom).
func childID(key string) string {
	h := sha256.Sum256([]byte("jobfence child workflow\x00" + key))
	b := h[:16]
	b[6] = b[6]&0x0f | 0x80
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// AwaitChild waits, inside the handler of the job that started child
// workflow id (StartChild), until every task of the workflow has ended,
// for timeout at most from the wait's first call, and returns the
// workflow with its tasks and their outputs (ChildOutput reads one). It
// is AwaitSignal of the signal pgqueue.ChildSignal(id): with the workflow
// still running, the job suspends (the error wraps worker.ErrSuspended;
// the handler returns it), holding no worker's slot, and runs again when
// the workflow ends (the workers' promoter tells it within its interval)
// or the timeout passes (an error wrapping worker.ErrSignalTimeout). The
// wait is a step: a later attempt does not wait again.
//
// A workflow that ended with a task discarded or cancelled is returned
// with an error wrapping ErrChildFailed, which the handler may handle
// (read the summary, compensate) or return. Await each child once; a
// workflow the job did not start is an error wrapping ErrNotChild.
func AwaitChild(ctx context.Context, id string, timeout time.Duration) (*pgqueue.WorkflowInfo, error) {
	job, b, err := childOf(ctx, "await child")
	if err != nil {
		return nil, err
	}
	// A child that ended before the wait: its signal is stored now, for
	// the wait below to take at once.
	if _, err := b.ChildEnded(ctx, job.ID, id); err != nil {
		return nil, fmt.Errorf("workflow: await child: %w", err)
	}
	if _, err := worker.AwaitSignal[json.RawMessage](ctx, pgqueue.ChildSignal(id), timeout); err != nil {
		return nil, fmt.Errorf("workflow: await child %s: %w", id, err)
	}
	w, err := b.Workflow(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("workflow: await child: %w", err)
	}
	if failed := w.Counts[queue.StateDiscarded] + w.Counts[queue.StateCancelled]; failed > 0 {
		return w, fmt.Errorf("workflow: child workflow %s (%s): %w: %d of its %d tasks", id, w.Name, ErrChildFailed, failed, w.Total())
	}
	return w, nil
}

// ChildOutput returns, decoded into T, the output recorded
// (worker.RecordOutput) by the task named name of workflow w, as
// AwaitChild returned it: an error wrapping ErrNoOutput if the task did
// not complete or recorded nothing, or if w has no such task.
func ChildOutput[T any](w *pgqueue.WorkflowInfo, name string) (T, error) {
	var v T
	if w == nil {
		return v, fmt.Errorf("workflow: output of %q: nil workflow", name)
	}
	for _, t := range w.Tasks {
		if t.TaskName != name {
			continue
		}
		if t.State != queue.StateCompleted || t.Output == nil {
			return v, fmt.Errorf("workflow: output of %q of workflow %s: %w (the task is %s)", name, w.ID, ErrNoOutput, t.State)
		}
		if err := json.Unmarshal(t.Output, &v); err != nil {
			return v, fmt.Errorf("workflow: output of %q does not decode into %T: %w", name, v, err)
		}
		return v, nil
	}
	return v, fmt.Errorf("workflow: output of %q: %w: workflow %s has no such task", name, ErrNoOutput, w.ID)
}
