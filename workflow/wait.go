package workflow

import (
	"context"
	"errors"
	"fmt"

	"github.com/jobfence/jobfence/queue/pgqueue"
)

// Awaiter is what Wait needs of a backend: pgqueue.Client has it.
type Awaiter interface {
	AwaitWorkflow(ctx context.Context, id string) (*pgqueue.WorkflowInfo, error)
}

// Wait returns workflow id with its tasks (as pgqueue.Client.Workflow
// reads it) once every one of its tasks has ended: completed, discarded
// or cancelled; tasks appended meanwhile are awaited too. A workflow whose
// task failed ends too, its dependents cancelled (or run anyway): read
// the summary's Counts and Tasks to tell. Wait is woken by a notification
// as tasks end and polls with backoff meanwhile (pgqueue.Config's
// AwaitPollMin and AwaitPollMax), so it works behind PgBouncer too; see
// docs/durable.md. An unknown ID is an error wrapping ErrNotFound; ctx
// ending is an error wrapping ctx's.
func Wait(ctx context.Context, b Awaiter, id string) (*pgqueue.WorkflowInfo, error) {
	if b == nil {
		return nil, errors.New("workflow: wait: nil backend")
	}
	if id == "" {
		return nil, errors.New("workflow: wait: a workflow ID is required")
	}
	w, err := b.AwaitWorkflow(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("workflow: wait: %w", err)
	}
	return w, nil
}
