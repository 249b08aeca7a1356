package pgqueue

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
)

// DefaultBulkBatch is the default of BulkParams.BatchSize.
const DefaultBulkBatch = 1000

// BulkParams selects the jobs RetryMatching and DeleteMatching change: the
// jobs of Queue, Kind and State (zero fields do not filter) that exist
// when the call starts. Jobs enqueued meanwhile are left alone.
type BulkParams struct {
	Queue string
	Kind  string
	State queue.State
	// BatchSize is how many jobs one statement changes, each batch in a
	// transaction of its own, so that a bulk action over a million jobs
	// neither holds a million row locks nor one long transaction that
	// stalls vacuum. Zero means DefaultBulkBatch.
	BatchSize int
}

// ErrBulkState reports a bulk action asked of a state it does not apply
// to: running jobs (their workers hold them) and, for a retry, completed
// ones (running them again would repeat their effects).
var ErrBulkState = errors.New("jobfence: no bulk action on that state")

// uniqueFree leaves out of a bulk retry a job with UniqueOpts whose
// unique key another job holds now (see ErrUniqueHeld): retrying it would
// run a duplicate, and breach the key's index, failing its batch.
const uniqueFree = `(j.unique_hash IS NULL OR NOT EXISTS (
    SELECT FROM jobfence_jobs d
    WHERE d.unique_hash = j.unique_hash AND jobfence_state_in_bitmask(d.unique_states, d.state) AND d.id <> j.id))`

// RetryMatching retries, as Retry does, every job that p selects and that
// Retry would retry: running and completed jobs and workflow tasks that
// their dependencies have not released are skipped, and asking for one of those states is an error
// wrapping ErrBulkState; so are jobs whose
// unique key another job holds. Two finished duplicates (of UniqueOpts)
// in one batch fail it with an error wrapping ErrUniqueHeld: retry them
// one by one. Idle workers of the
// queues concerned are woken after each batch. It returns how many jobs it
// retried, also when it fails part way (the batches before the failure
// stay retried).
func (c *Client) RetryMatching(ctx context.Context, p BulkParams) (int64, error) {
	switch p.State {
	case queue.StateRunning:
		return 0, fmt.Errorf("pgqueue: retry matching: %w: running jobs are held by their workers; cancel them first", ErrBulkState)
	case queue.StateCompleted:
		return 0, fmt.Errorf("pgqueue: retry matching: %w: completed jobs ran successfully, and retrying them would repeat their effects; retry them one by one with RetryForce", ErrBulkState)
	case queue.StatePending:
		return 0, fmt.Errorf("pgqueue: retry matching: %w: pending workflow tasks wait for their dependencies and run once they release them; RetryWorkflow retries a workflow", ErrBulkState)
	}
	return c.bulk(ctx, "retry", p, "jobfence_jobs", `UPDATE jobfence_jobs j SET `+retrySet+` FROM batch WHERE j.id = batch.id`,
		`j.state NOT IN ('running', 'completed', 'pending') AND coalesce(j.deps_left, 0) = 0 AND `+uniqueFree, true)
}

// DeleteMatching deletes every job that p selects that is not running
// (asking for running jobs is an error wrapping ErrBulkState), as Delete
// does. It returns how many jobs it deleted, also when it fails part way.
func (c *Client) DeleteMatching(ctx context.Context, p BulkParams) (int64, error) {
	if p.State == queue.StateRunning {
		return 0, fmt.Errorf("pgqueue: delete matching: %w: running jobs are held by their workers; cancel them first", ErrBulkState)
	}
	n, err := c.bulk(ctx, "delete", p, "jobfence_jobs", "", `j.state <> 'running'`, false)
	if err != nil || (p.State != "" && p.State != queue.StateCompleted) {
		return n, err
	}
	// Completed jobs that moved to the finished table (see leavesSQL).
	m, err := c.bulk(ctx, "delete", p, "jobfence_jobs_finished",
		`DELETE FROM jobfence_jobs_finished j USING batch WHERE j.id = batch.id`, `true`, false)
	return n + m, err
}

// bulk applies change (an UPDATE of table j joined to batch, or a DELETE
// of jobfence_jobs_finished; empty for a delete of jobfence_jobs, done as
// Delete does) to the jobs of table (jobfence_jobs or
// jobfence_jobs_finished) that p selects and that also meet eligible, in
// batches in ascending ID order. The IDs walk forward from one batch to the
// next and stop at the greatest ID when the call began, so a job is
// changed once even when it still matches afterwards, and new jobs are
// not touched. Rows locked by a claim are skipped.
func (c *Client) bulk(ctx context.Context, what string, p BulkParams, table, change, eligible string, notify bool) (int64, error) {
	if p.State != "" {
		if _, err := queue.ParseState(string(p.State)); err != nil {
			return 0, fmt.Errorf("pgqueue: %s matching: %w", what, err)
		}
	}
	if p.BatchSize <= 0 {
		p.BatchSize = DefaultBulkBatch
	}
	var last int64
	if err := c.pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM `+table).Scan(&last); err != nil {
		return 0, fmt.Errorf("pgqueue: %s matching: %w", what, err)
	}
	where, args := jobFilters([]string{"j.id > $1", "j.id <= $2", eligible}, []any{int64(0), last, p.BatchSize},
		p.Queue, p.Kind, p.State)
	q := `WITH batch AS (
    SELECT j.id FROM ` + table + ` j WHERE ` + strings.Join(where, " AND ") + `
    ORDER BY j.id LIMIT $3 FOR UPDATE SKIP LOCKED
)
` + change + ` RETURNING j.id, j.queue`
	if change == "" {
		q = `SELECT j.id FROM jobfence_jobs j WHERE ` + strings.Join(where, " AND ") + `
ORDER BY j.id LIMIT $3 FOR UPDATE SKIP LOCKED`
	}
	var total int64
	for {
		var n, cursor int64
		var queues []string
		var err error
		if change == "" {
			n, cursor, queues, err = c.deleteBatch(ctx, q, args)
		} else {
			n, cursor, queues, err = c.bulkBatch(ctx, q, args)
		}
		total += n
		if uniqueHeld(err) {
			err = fmt.Errorf("%w: %w", ErrUniqueHeld, err)
		}
		if err != nil {
			return total, fmt.Errorf("pgqueue: %s matching: %w", what, err)
		}
		if notify && len(queues) > 0 {
			if _, err := c.pool.Exec(ctx, wakeSQL, insertChannel, queues); err != nil {
				return total, fmt.Errorf("pgqueue: %s matching: notify: %w", what, err)
			}
		}
		if n < int64(p.BatchSize) {
			return total, nil
		}
		args[0] = cursor
	}
}

// bulkBatch runs one batch of bulk: how many jobs it changed, the greatest
// ID among them and their distinct queues.
func (c *Client) bulkBatch(ctx context.Context, q string, args []any) (n, cursor int64, queues []string, err error) {
	rows, err := c.pool.Query(ctx, q, args...)
	if err != nil {
		return 0, 0, nil, err
	}
	defer rows.Close()
	seen := map[string]bool{}
	for rows.Next() {
		var id int64
		var name string
		if err := rows.Scan(&id, &name); err != nil {
			return 0, 0, nil, err
		}
		n++
		cursor = max(cursor, id)
		if !seen[name] {
			seen[name] = true
			queues = append(queues, name)
		}
	}
	if err := rows.Err(); err != nil {
		// The statement failed whole: nothing of it was changed.
		return 0, 0, nil, err
	}
	return n, cursor, queues, nil
}

// deleteBatch deletes one batch of bulk in a bounded transaction: the
// jobs that q selects and locks, with their workflow tasks' dependents
// cancelled as Delete cancels them.
func (c *Client) deleteBatch(ctx context.Context, q string, args []any) (n, cursor int64, queues []string, err error) {
	err = c.boundedTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, q, args...)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil || len(ids) == 0 {
			return err
		}
		deleted, qs, err := c.deleteJobs(ctx, tx, ids)
		if err != nil {
			return err
		}
		n, queues = int64(len(deleted)), qs
		for _, id := range deleted {
			cursor = max(cursor, id)
		}
		return nil
	})
	if err != nil {
		return 0, 0, nil, err
	}
	return n, cursor, queues, nil
}
