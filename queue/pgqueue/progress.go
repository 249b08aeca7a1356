package pgqueue

import (
	"context"
	"fmt"

	"github.com/jobfence/jobfence/queue"
)

// progressSQL stores a running job's progress under its fence: a
// primary-key update of the one row, which changes nothing once the job
// left running or was claimed again under a newer fence. It moves no job
// (running stays running) and leaves the lease alone: only heartbeats
// extend it.
//
// transition: progress
const progressSQL = `UPDATE jobfence_jobs SET progress = $3::jsonb WHERE id = $1 AND fence = $2 AND state = 'running'`

// RecordProgress implements queue.ProgressRecorder: one round trip, sent
// only by a handler that reports progress (worker.Progress), throttled by
// the worker. A job that never reports progress costs nothing more: the
// claims and outcomes neither read nor write the column, and a completion
// that moves the row to jobfence_jobs_finished carries it with the rest.
func (c *Client) RecordProgress(ctx context.Context, l queue.Lease, progress []byte) error {
	tag, err := c.pool.Exec(ctx, progressSQL, l.ID, l.Fence, jsonbOutput(progress))
	if err != nil {
		return fmt.Errorf("pgqueue: record progress of job %d: %w", l.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return &queue.StaleFenceError{Lease: l}
	}
	return nil
}
