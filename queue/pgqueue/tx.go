package pgqueue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/internal/txbound"
	"github.com/jobfence/jobfence/queue"
)

// ErrNoTxSlots is returned by BeginTx on a pool too small to leave
// Config.TxReserve connections to the worker.
var ErrNoTxSlots = errors.New("pgqueue: the pool has no connection for transactional handlers beyond Config.TxReserve")

// minIdleBound floors the bounds BeginTx sets, so that a tiny lease does
// not kill a session on the spot.
const minIdleBound = 100 * time.Millisecond

// BeginTx starts a transaction for a transactional handler whose claim
// holds a lease of lease, once fewer than TxSlots such transactions are
// open. PostgreSQL ends the transaction (and its session) if it sits idle
// longer than lease, and any lock wait in it fails after lease: a holder
// frozen mid-handler (SIGSTOP, a paused VM) cannot keep its locks past its
// lease. CompleteTx tightens the idle bound to the lease the job has left.
func (c *Client) BeginTx(ctx context.Context, lease time.Duration) (pgx.Tx, error) {
	if c.txSlots == nil {
		return nil, fmt.Errorf("%w (%d connections)", ErrNoTxSlots, c.pool.Config().MaxConns)
	}
	select {
	case c.txSlots <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("pgqueue: begin: waiting for a connection: %w", context.Cause(ctx))
	}
	ms := max(lease, minIdleBound).Milliseconds()
	// One round trip: the settings ride with BEGIN.
	begin := fmt.Sprintf("BEGIN; SET LOCAL idle_in_transaction_session_timeout = %d; SET LOCAL lock_timeout = %d", ms, ms)
	tx, err := c.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: begin})
	if err != nil {
		<-c.txSlots
		return nil, fmt.Errorf("pgqueue: begin: %w", err)
	}
	return &slotTx{Tx: tx, release: func() { <-c.txSlots }}, nil
}

// slotTx gives its slot back when it ends.
type slotTx struct {
	pgx.Tx
	once    sync.Once
	release func()
}

func (t *slotTx) Commit(ctx context.Context) error {
	defer t.once.Do(t.release)
	return t.Tx.Commit(ctx)
}

func (t *slotTx) Rollback(ctx context.Context) error {
	defer t.once.Do(t.release)
	return t.Tx.Rollback(ctx)
}

// completeOneSQL completes one job under its fence, storing its output
// ($3), and bounds the rest of the transaction by the lease the row still
// has, by the database's clock (txbound): from here until COMMIT the
// transaction holds the job's row, which the rescuer skips, so a holder
// frozen before its COMMIT would otherwise pin the job as running, its
// lease long gone, until it woke. The main query reads the row as it was
// before the update (a data-modifying WITH is not visible to it), lease
// included, and returns a row only if the completion applied, that is if
// the fence still held the job. A job whose row leaves the jobs table
// moves (or is deleted) as in completeSQL.
//
// transition: complete
const completeOneSQL = `
WITH l AS (
    SELECT j.id, $3::jsonb AS output, $4::bytea AS trace, ` + leavesSQL + ` AS leaves,
        coalesce(j.delete_on_complete, false) AS drop_it
    FROM jobfence_jobs j
    WHERE j.id = $1 AND j.fence = $2 AND j.state = 'running'
    FOR UPDATE OF j
), ` + moveFinishedSQL + `, done AS (
    UPDATE jobfence_jobs j
    SET state = 'completed', finalized_at = now(), lease_expires_at = NULL, output = l.output, run_trace = l.trace
    FROM l
    WHERE j.id = l.id AND NOT l.leaves
    RETURNING 1
)
SELECT` + txbound.Set + `
FROM jobfence_jobs, (SELECT 1 FROM gone UNION ALL SELECT 1 FROM done) d
WHERE id = $1`

// CompleteTx completes a job under its fence inside tx, so the job's
// completion commits with the handler's own writes. It returns a
// *queue.StaleFenceError when the fence is stale: the caller must then roll
// tx back, and none of its writes take effect. From then until COMMIT, the
// transaction may sit idle only for the lease the job has left (at least a
// second): a holder frozen before its COMMIT loses its transaction when its
// lease ends.
func (c *Client) CompleteTx(ctx context.Context, tx pgx.Tx, l queue.Lease) error {
	return c.FinishTx(ctx, tx, queue.Finish{Lease: l, Outcome: queue.OutcomeComplete})
}

// FinishTx is CompleteTx for a completion f that may carry the handler's
// output (f.Output), stored by the fenced update, and may be a workflow
// task's (f.Workflow): its dependents are released in tx, after the
// completion, so they become available if and only if tx commits; of a
// task with more than a chunk of them (Config.ReleaseChunk), the rest
// once tx has committed, by ReleaseDependents. f's Outcome must be
// OutcomeComplete.
func (c *Client) FinishTx(ctx context.Context, tx pgx.Tx, f queue.Finish) error {
	if f.Outcome != queue.OutcomeComplete {
		return fmt.Errorf("pgqueue: finish job %d in tx: outcome %s: only a completion commits with a transaction", f.ID, f.Outcome)
	}
	var output []byte
	if f.Output != nil {
		output = jsonbOutput(f.Output)
	}
	rows, err := tx.Query(ctx, completeOneSQL, f.ID, f.Fence, output, f.Trace)
	if err != nil {
		return fmt.Errorf("pgqueue: complete job %d in tx: %w", f.ID, err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pgqueue: complete job %d in tx: %w", f.ID, err)
	}
	if n == 0 {
		return &queue.StaleFenceError{Lease: f.Lease}
	}
	if f.Workflow {
		// Dependents past the first chunk are released after tx commits:
		// the caller calls ReleaseDependents then (the worker does), or a
		// worker's maintenance does.
		if _, err := release(ctx, tx, []int64{f.ID}, false, c.cfg.ReleaseChunk, insertChannel); err != nil {
			return fmt.Errorf("pgqueue: complete job %d in tx: %w", f.ID, err)
		}
	}
	return nil
}
