package jobfence

import (
	"context"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// The parameters of the job methods, so that a service names them from
// this package alone. Each is the pgqueue type, not a copy.
type (
	// ListParams filters List: Queue, Kind, State (a queue.State, for
	// example "discarded"), UniqueKey, and keyset paging with Before or
	// After and Limit (100 by default); zero fields do not filter. See
	// pgqueue.ListParams.
	ListParams = pgqueue.ListParams

	// BulkParams selects the jobs of RetryMatching and DeleteMatching:
	// Queue, Kind and State (zero fields do not filter), changed in
	// batches of BatchSize (1,000 by default). See pgqueue.BulkParams.
	BulkParams = pgqueue.BulkParams
)

// Errors of the job methods, re-exported from the packages underneath;
// test for them with errors.Is.
var (
	// ErrJobNotFound reports a job ID that names no stored job (Get,
	// Retry, Delete, Cancel).
	ErrJobNotFound = queue.ErrJobNotFound
	// ErrJobCompleted reports a Retry of a completed job: it would run
	// again and repeat its effects. RetryForce runs it again anyway.
	ErrJobCompleted = pgqueue.ErrJobCompleted
	// ErrJobRunning reports a Delete of a running job: cancel it first.
	ErrJobRunning = pgqueue.ErrJobRunning
	// ErrUniqueHeld reports a Retry of a job whose unique key another
	// unfinished job holds now: it would run a duplicate.
	ErrUniqueHeld = pgqueue.ErrUniqueHeld
	// ErrDependenciesPending reports a Retry of a workflow task that its
	// dependencies have not released: it would run before them
	// (Workflows().Retry retries it with them).
	ErrDependenciesPending = pgqueue.ErrDependenciesPending
	// ErrBulkState reports RetryMatching or DeleteMatching asked of a
	// state they do not apply to (running jobs; completed and pending
	// ones for a retry).
	ErrBulkState = pgqueue.ErrBulkState
	// ErrBadListParams reports ListParams that contradict each other
	// (Before and After both set).
	ErrBadListParams = pgqueue.ErrBadListParams
)

// List returns the stored jobs that p selects, newest first, finished
// ones included. An unknown p.State is an error wrapping
// queue.ErrUnknownState. See pgqueue.Client.List.
func (c *Client) List(ctx context.Context, p ListParams) ([]*queue.Job, error) {
	return c.pg.List(ctx, p)
}

// Retry makes job id, which is not running, ready to run now, giving it
// one more attempt if it had none left: the way back for a discarded or
// cancelled job. It refuses a completed job (ErrJobCompleted: see
// RetryForce), a workflow task its dependencies have not released
// (ErrDependenciesPending) and a job whose unique key another job holds
// now (ErrUniqueHeld); an unknown ID wraps ErrJobNotFound.
func (c *Client) Retry(ctx context.Context, id int64) error {
	return c.pg.Retry(ctx, id)
}

// RetryForce is Retry that also runs a completed job again, for when its
// effects must happen again (they were lost or undone).
func (c *Client) RetryForce(ctx context.Context, id int64) error {
	return c.pg.RetryForce(ctx, id)
}

// Delete removes job id, whatever its state but running (ErrJobRunning:
// cancel it first); its unique key, if any, is free again. A workflow task
// deleted before it finished cancels its pending dependents, as Cancel
// does. An unknown ID wraps ErrJobNotFound.
func (c *Client) Delete(ctx context.Context, id int64) error {
	return c.pg.Delete(ctx, id)
}

// RetryMatching retries, as Retry does, every job that p selects and that
// Retry would retry (asking for running, completed or pending jobs is an
// error wrapping ErrBulkState), in batches of p.BatchSize, each in a
// transaction of its own, and returns how many it retried, also when it
// fails part way. See pgqueue.Client.RetryMatching.
func (c *Client) RetryMatching(ctx context.Context, p BulkParams) (int64, error) {
	return c.pg.RetryMatching(ctx, p)
}

// DeleteMatching deletes, as Delete does, every job that p selects that is
// not running (asking for running jobs is an error wrapping ErrBulkState),
// in batches, and returns how many it deleted, also when it fails part
// way. See pgqueue.Client.DeleteMatching.
func (c *Client) DeleteMatching(ctx context.Context, p BulkParams) (int64, error) {
	return c.pg.DeleteMatching(ctx, p)
}

// Counts returns how many jobs of queue q (every queue when q is empty)
// are in each state, finished ones included. It reads every job, so it
// suits tests and small tables; Queues().List counts with a cap.
func (c *Client) Counts(ctx context.Context, q string) (map[queue.State]int64, error) {
	return c.pg.Counts(ctx, q)
}
