package jobfence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/workflow"
)

// ErrJobFailed is wrapped by Result's error for a job that ended
// discarded or cancelled: the error is a *JobFailedError, which says how.
var ErrJobFailed = errors.New("jobfence: job failed")

// ErrNoOutput is wrapped by Result's error for a job that completed
// without recording an output (worker.RecordOutput).
var ErrNoOutput = queue.ErrNoOutput

// JobFailedError is Result's error for a job that ended without
// completing: discarded (its attempts ran out, its deadline passed, its
// arguments did not decode) or cancelled (Cancel, its handler's
// JobCancel, a workflow task whose dependency failed). errors.Is(err, ErrJobFailed) reports true for it.
type JobFailedError struct {
	// ID and Kind name the job.
	ID   int64
	Kind string
	// State is how it ended: queue.StateDiscarded or StateCancelled.
	State queue.State
	// Attempts is how many attempts it spent.
	Attempts int
	// LastError is the message of its last recorded error (the last
	// AttemptError's); empty when it recorded none (a job cancelled
	// before it ran).
	LastError string
}

func (e *JobFailedError) Error() string {
	var msg string
	switch e.Attempts {
	case 0:
		msg = fmt.Sprintf("jobfence: job %d (%s) was %s before it ran", e.ID, e.Kind, e.State)
	case 1:
		msg = fmt.Sprintf("jobfence: job %d (%s) was %s after 1 attempt", e.ID, e.Kind, e.State)
	default:
		msg = fmt.Sprintf("jobfence: job %d (%s) was %s after %d attempts", e.ID, e.Kind, e.State, e.Attempts)
	}
	if e.LastError == "" {
		return msg + ", with no error recorded"
	}
	return msg + ": " + e.LastError
}

// Is reports whether target is ErrJobFailed.
func (e *JobFailedError) Is(target error) bool { return target == ErrJobFailed }

// Wait returns job id once it has ended (completed, discarded or
// cancelled), as Get returns it, its output included. It is woken by a
// notification from the transaction that ends the job, which only an
// awaited job sends (see docs/durable.md), and polls with backoff
// meanwhile (pgqueue.Config's AwaitPollMin to AwaitPollMax), so
// it works behind PgBouncer in transaction mode too, a ListenURL making it
// prompt there. An ID that names no job, and a job deleted or pruned (its
// retention passed) before Wait read it, is an error wrapping
// ErrJobNotFound; ctx ending first is an error wrapping ctx's. Any client
// may wait, insert-only included.
func (c *Client) Wait(ctx context.Context, id int64) (*queue.Job, error) {
	return c.pg.AwaitJob(ctx, id)
}

// Result waits for job id as Client.Wait does, then returns the output its
// handler recorded (worker.RecordOutput) decoded into T. A job that ended
// discarded or cancelled is a *JobFailedError (errors.Is ErrJobFailed); a
// completed job that recorded no output is an error wrapping ErrNoOutput;
// Wait's errors are returned as they are.
func Result[T any](ctx context.Context, c *Client, id int64) (T, error) {
	var v T
	if c == nil {
		return v, errors.New("jobfence: result: nil client")
	}
	j, err := c.Wait(ctx, id)
	if err != nil {
		return v, err
	}
	if j.State != queue.StateCompleted {
		fe := &JobFailedError{ID: j.ID, Kind: j.Kind, State: j.State, Attempts: j.Attempt}
		if n := len(j.Errors); n > 0 {
			fe.LastError = j.Errors[n-1].Error
		}
		return v, fe
	}
	if len(j.Output) == 0 {
		return v, fmt.Errorf("jobfence: result of job %d (%s): it completed without recording an output (worker.RecordOutput): %w", j.ID, j.Kind, ErrNoOutput)
	}
	if err := json.Unmarshal(j.Output, &v); err != nil {
		return v, fmt.Errorf("jobfence: result of job %d (%s): its output does not decode into %T: %w", j.ID, j.Kind, v, err)
	}
	return v, nil
}

// Wait returns workflow id with its tasks, as Get does, once every one of
// its tasks has ended (completed, discarded or cancelled); see
// workflow.Wait. An unknown ID wraps ErrWorkflowNotFound; ctx ending
// first is an error wrapping ctx's.
func (w Workflows) Wait(ctx context.Context, id string) (*WorkflowInfo, error) {
	return workflow.Wait(ctx, w.c.pg, id)
}
