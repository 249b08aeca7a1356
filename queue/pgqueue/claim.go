package pgqueue

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
)

// claimSQL claims up to $2 ready jobs of queue $1. SKIP LOCKED hands each
// row to one claimer only; the single nextval is this claim's fence.
//
// It reads only available jobs, through the partial index
// jobfence_jobs_available (migration 00006), so its cost does not grow
// with the jobs waiting for a future time: scheduled jobs, retries in
// backoff and snoozes wait in jobfence_jobs_waiting until Promote makes
// them available. The scheduled_at bound only guards against an available
// row stamped in the future by hand; the index filters it without a heap
// visit.
//
// The fence is drawn only after every row of the claim is locked: f reads
// all of next (count) before it calls nextval. Drawn first, a fence could
// be older than that of an owner who claimed, lost and released one of the
// rows while this claim was still scanning, and the new owner would then
// hold the smaller fence, losing every fenced write to its predecessor.
// An empty claim draws no fence.
//
// The update finds each locked row by its ctid, not by a second descent
// of the primary key: a row locked by this statement cannot move before
// it commits. (If a concurrent committed update made the locked version
// newer than the statement's snapshot, the TID scan does not see it and
// the row is left unclaimed, its lock released at commit: a claim of
// fewer rows, never a wrong one.)
const claimSQL = claimNext + claimRest

// claimAfterSQL is claimSQL starting after the cursor ($5, $6, $7): the
// same claim without walking the index entries of jobs claimed before
// (see claimCursor).
const claimAfterSQL = claimNext + `
      AND (priority, scheduled_at, id) > ($5::smallint, $6::timestamptz, $7::bigint)` + claimRest

// claimNext and claimRest are the two claims' shared text, split where
// claimAfterSQL adds its bound.
const (
	claimNext = `
WITH next AS MATERIALIZED (
    SELECT id, ctid FROM jobfence_jobs
    WHERE state = 'available' AND queue = $1 AND scheduled_at <= now()`
	claimRest = `
    ORDER BY priority, scheduled_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), f AS MATERIALIZED (
    SELECT nextval('jobfence_fence_seq') AS fence FROM (SELECT count(*) AS n FROM next) c WHERE c.n > 0
)
UPDATE jobfence_jobs j
SET state = 'running', attempt = j.attempt + 1, fence = f.fence,
    lease_expires_at = now() + $3::bigint * interval '1 microsecond',
    attempted_at = now(), attempted_by = j.attempted_by[greatest(array_length(j.attempted_by, 1) - 8, 1):] || $4::text
FROM next, f
WHERE j.ctid = next.ctid
RETURNING ` + jobColumns
)

// jobColumns are the columns scanJob reads, in order.
const jobColumns = `j.id, j.queue, j.kind, j.args, j.state, j.priority, j.attempt, j.max_attempts, j.fence,
    j.scheduled_at, j.created_at, j.attempted_at, j.lease_expires_at, j.unique_key, j.errors, j.attempted_by, j.metadata`

// Claim implements queue.Backend.
func (c *Client) Claim(ctx context.Context, p queue.ClaimParams) ([]*queue.Job, error) {
	if p.Limit <= 0 {
		return nil, nil
	}
	cur := c.cursors.get(p.Queue)
	began := time.Now()
	after, from := cur.start(began)
	args := []any{p.Queue, p.Limit, p.Lease.Microseconds(), p.WorkerID}
	var jobs []*queue.Job
	if after {
		var err error
		jobs, err = c.claim(ctx, p.Queue, claimAfterSQL, append(args, from.priority, from.scheduledAt, from.id)...)
		if err != nil {
			return nil, err
		}
		if len(jobs) == p.Limit {
			cur.claimed(jobs, p.Limit, time.Since(began))
			return jobs, nil
		}
		// The queue may end before the cursor: look there at once rather
		// than report fewer jobs than are waiting.
		args[1] = p.Limit - len(jobs)
	}
	more, err := c.claim(ctx, p.Queue, claimSQL, args...)
	if err != nil && len(jobs) == 0 {
		return nil, err
	}
	// The jobs claimed after the cursor are committed and ours even if
	// the second claim failed.
	jobs = append(jobs, more...)
	cur.claimed(jobs, p.Limit, time.Since(began))
	return jobs, nil
}

// claim runs one of the claim statements.
func (c *Client) claim(ctx context.Context, q, sql string, args ...any) ([]*queue.Job, error) {
	rows, err := c.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("pgqueue: claim from %q: %w", q, err)
	}
	jobs, err := scanJobs(rows)
	if err != nil {
		return nil, fmt.Errorf("pgqueue: claim from %q: %w", q, err)
	}
	return jobs, nil
}

func scanJobs(rows pgx.Rows) ([]*queue.Job, error) {
	defer rows.Close()
	var jobs []*queue.Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, rows.Err()
}

func scanJob(row pgx.Row) (*queue.Job, error) {
	var (
		j         queue.Job
		state     string
		priority  int16
		attempted *time.Time
		lease     *time.Time
		unique    *string
		errs      []byte
		meta      []byte
	)
	if err := row.Scan(&j.ID, &j.Queue, &j.Kind, &j.EncodedArgs, &state, &priority, &j.Attempt, &j.MaxAttempts,
		&j.Fence, &j.ScheduledAt, &j.CreatedAt, &attempted, &lease, &unique, &errs, &j.AttemptedBy, &meta); err != nil {
		return nil, err
	}
	j.State = queue.State(state)
	j.Priority = int(priority)
	if attempted != nil {
		j.AttemptedAt = *attempted
	}
	if lease != nil {
		j.LeaseExpiresAt = *lease
	}
	if unique != nil {
		j.UniqueKey = *unique
	}
	if len(errs) > 2 {
		if err := json.Unmarshal(errs, &j.Errors); err != nil {
			return nil, fmt.Errorf("job %d: decode errors: %w", j.ID, err)
		}
	}
	// Most jobs carry none: '{}' is left as a nil map, no allocation.
	if len(meta) > 2 {
		var err error
		if j.Metadata, err = decodeMetadata(meta); err != nil {
			return nil, fmt.Errorf("job %d: decode metadata: %w", j.ID, err)
		}
	}
	return &j, nil
}
