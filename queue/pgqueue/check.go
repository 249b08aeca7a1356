package pgqueue

import (
	"context"
	"errors"

	"github.com/jobfence/jobfence/migrations"
	"github.com/jobfence/jobfence/queue"
)

// Check implements queue.Checker with migrations.Check: when jobfence's
// tables are missing from the pool's search_path it returns the
// *migrations.NotMigratedError, which names the schema and says to run
// `jobfence migrate up`, and which is also errors.Is queue.ErrNotSetUp.
// Other errors (an unreachable server) are returned as they are.
func (c *Client) Check(ctx context.Context) error {
	err := migrations.Check(ctx, c.pool)
	var nm *migrations.NotMigratedError
	if errors.As(err, &nm) {
		return notSetUpError{nm}
	}
	return err
}

// notSetUpError is a *migrations.NotMigratedError that backend-neutral
// callers (a worker) also recognise, as queue.ErrNotSetUp.
type notSetUpError struct{ err *migrations.NotMigratedError }

func (e notSetUpError) Error() string   { return e.err.Error() }
func (e notSetUpError) Unwrap() []error { return []error{e.err, queue.ErrNotSetUp} }
