package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// checkTimeout bounds Start's check of the backend: a server that accepts
// connections but does not answer must not hold up Start, whose contract
// is to leave an unavailable backend to the retrying loops.
const checkTimeout = 5 * time.Second

// checkBackend asks a backend that implements queue.Checker whether it is
// set up. It returns an error only when it is not; an unreachable backend
// is logged, and the fetch loops keep trying it as they always do.
func (w *Worker) checkBackend(ctx context.Context) error {
	c, ok := w.backend.(queue.Checker)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	err := c.Check(ctx)
	switch {
	case errors.Is(err, queue.ErrNotSetUp):
		return fmt.Errorf("jobfence: worker: start: %w", err)
	case err != nil:
		w.log.Warn("jobfence: cannot check the backend; starting anyway, claims are retried until it answers", "err", err)
	}
	return nil
}
