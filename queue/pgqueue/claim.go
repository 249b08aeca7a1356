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
// It starts after the queue's claim position (b), the last job any claim
// of the queue took (migration 00008), rather than at the index's start:
// the entries of jobs claimed since the last VACUUM stay in the index,
// dead, and a claim from the start walks every one of them (4,000 index
// pages a claim halfway through a 1M-job burn-down; in a fleet, every
// instance walked the jobs the others had claimed since its own last
// claim). It reads from the start instead when no claim of the queue did
// so for $5 microseconds, so a job that sorts before the position (a
// higher priority, an earlier time, a put-back) waits at most that long;
// which jobs a claim takes never decides safety, fences do. The last
// column says whether it read from the start.
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
//
// moved and added keep the position: it only moves on (a claim from the
// start takes jobs before it), and a concurrent claim's update is
// rechecked against the newest row.
const claimSQL = `
WITH b AS MATERIALIZED (
    SELECT k.head, k.priority, k.scheduled_at, k.id FROM (
        SELECT true AS head, (-32768)::smallint AS priority, '-infinity'::timestamptz AS scheduled_at, 0::bigint AS id
        WHERE NOT EXISTS (
            SELECT FROM jobfence_claim_hints
            WHERE queue = $1 AND head_at > now() - $5::bigint * interval '1 microsecond')
        UNION ALL
        SELECT false, priority, scheduled_at, id FROM jobfence_claim_hints WHERE queue = $1
    ) k
    ORDER BY k.head DESC
    LIMIT 1
), next AS MATERIALIZED (
    SELECT id, ctid FROM jobfence_jobs
    WHERE state = 'available' AND queue = $1 AND scheduled_at <= now()
      AND (priority, scheduled_at, id) > ((SELECT priority FROM b), (SELECT scheduled_at FROM b), (SELECT id FROM b))
    ORDER BY priority, scheduled_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), f AS MATERIALIZED (
    SELECT nextval('jobfence_fence_seq') AS fence FROM (SELECT count(*) AS n FROM next) c WHERE c.n > 0
), u AS (
    UPDATE jobfence_jobs j
    SET state = 'running', attempt = j.attempt + 1, fence = f.fence,
        lease_expires_at = now() + $3::bigint * interval '1 microsecond',
        attempted_at = now(), attempted_by = j.attempted_by[greatest(array_length(j.attempted_by, 1) - 8, 1):] || $4::text
    FROM next, f
    WHERE j.ctid = next.ctid
    RETURNING ` + jobColumns + `
), last AS (
    SELECT u.priority, u.scheduled_at, u.id FROM u
    ORDER BY u.priority DESC, u.scheduled_at DESC, u.id DESC
    LIMIT 1
), moved AS (
    UPDATE jobfence_claim_hints h
    SET priority = CASE WHEN (h.priority, h.scheduled_at, h.id) < (l.priority, l.scheduled_at, l.id) THEN l.priority ELSE h.priority END,
        scheduled_at = CASE WHEN (h.priority, h.scheduled_at, h.id) < (l.priority, l.scheduled_at, l.id) THEN l.scheduled_at ELSE h.scheduled_at END,
        id = CASE WHEN (h.priority, h.scheduled_at, h.id) < (l.priority, l.scheduled_at, l.id) THEN l.id ELSE h.id END,
        head_at = CASE WHEN (SELECT head FROM b) THEN now() ELSE h.head_at END
    FROM (SELECT) one LEFT JOIN last l ON true
    WHERE h.queue = $1 AND ((SELECT head FROM b) OR l.id IS NOT NULL)
), added AS (
    INSERT INTO jobfence_claim_hints (queue, priority, scheduled_at, id, head_at)
    SELECT $1, coalesce(l.priority, -32768), coalesce(l.scheduled_at, '-infinity'), coalesce(l.id, 0), now()
    FROM (SELECT) one LEFT JOIN last l ON true
    WHERE NOT EXISTS (SELECT FROM jobfence_claim_hints WHERE queue = $1)
    ON CONFLICT (queue) DO NOTHING
)
SELECT u.*, (SELECT head FROM b) FROM u`

// claimTurnSQL makes the claims of a queue take turns: run before claimSQL
// in one transaction, it waits until no other claim of the queue holds the
// lock, and claimSQL's snapshot is taken after that claim committed. Claims
// that ran at once each skipped the rows the others held (and locked the
// newest versions of rows the others had just claimed, which the owners'
// outcomes then waited for): in a fleet of 20 instances a claim read 22
// to 27 buffers per job claimed against 10 one at a time. The lock decides
// only who claims first, never which job is whose: SKIP LOCKED and fences
// do that, as without it (Config.ConcurrentClaims).
//
// $2 is the turn (see claimTurns).
const claimTurnSQL = `SELECT pg_advisory_xact_lock('jobfence_jobs'::regclass::oid::int, hashtext($1) # $2::int)`

// jobColumns are the columns scanJob reads, in order.
const jobColumns = `j.id, j.queue, j.kind, j.args, j.state, j.priority, j.attempt, j.max_attempts, j.fence,
    j.scheduled_at, j.created_at, j.attempted_at, j.lease_expires_at, j.unique_key, j.errors, j.attempted_by, j.metadata, j.trace_context`

// Claim implements queue.Backend.
func (c *Client) Claim(ctx context.Context, p queue.ClaimParams) ([]*queue.Job, error) {
	if p.Limit <= 0 {
		return nil, nil
	}
	pace := c.paces.get(p.Queue)
	turn, own := pace.turn()
	if own {
		defer pace.done(turn)
	}
	args := []any{p.Queue, p.Limit, p.Lease.Microseconds(), p.WorkerID, pace.headInterval().Microseconds()}
	jobs, head, took, err := c.claim(ctx, p.Queue, turn, args...)
	if err != nil {
		return nil, err
	}
	if len(jobs) < p.Limit && !head {
		// The queue may end before the claim position: look there at once
		// rather than report fewer jobs than are waiting, unless a claim
		// just did.
		args[1], args[4] = p.Limit-len(jobs), headRetryInterval.Microseconds()
		more, _, tookMore, err := c.claim(ctx, p.Queue, turn, args...)
		took += tookMore
		if err != nil && len(jobs) == 0 {
			return nil, err
		}
		// The jobs of the first claim are committed and ours even if the
		// second failed.
		jobs = append(jobs, more...)
	}
	pace.claimed(took)
	return jobs, nil
}

// claim runs claimSQL, after claimTurnSQL for turn unless claims run at
// once, and reports whether it read from the queue's start and how long it
// took from its turn on (the wait for the turn is not the claim's cost:
// counted in, a fleet's claims seemed slow and read from the start only
// every few seconds).
func (c *Client) claim(ctx context.Context, q string, turn int, args ...any) (jobs []*queue.Job, head bool, took time.Duration, err error) {
	var b pgx.Batch
	if !c.cfg.ConcurrentClaims {
		b.Queue(claimTurnSQL, q, turn)
	}
	// One batch is one transaction: the lock is held until the claim
	// commits.
	b.Queue(claimSQL, args...)
	began := time.Now()
	br := c.pool.SendBatch(ctx, &b)
	defer br.Close()
	fail := func(err error) ([]*queue.Job, bool, time.Duration, error) {
		return nil, false, 0, fmt.Errorf("pgqueue: claim from %q: %w", q, err)
	}
	if !c.cfg.ConcurrentClaims {
		if _, err := br.Exec(); err != nil {
			return fail(err)
		}
		began = time.Now()
	}
	rows, err := br.Query()
	if err != nil {
		return fail(err)
	}
	for rows.Next() {
		j, err := scanJob(rows, &head)
		if err != nil {
			rows.Close()
			return fail(err)
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	if err := br.Close(); err != nil {
		return fail(err)
	}
	return jobs, head, time.Since(began), nil
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

// scanJob reads a row of jobColumns, then into more.
func scanJob(row pgx.Row, more ...any) (*queue.Job, error) {
	var (
		j         queue.Job
		state     string
		priority  int16
		attempted *time.Time
		lease     *time.Time
		unique    *string
		errs      []byte
		meta, tc  []byte
	)
	// One slice, sized for more too: appending more to a literal of
	// exactly the columns would copy it, a second allocation for every job
	// a claim returns.
	dest := append(make([]any, 0, 18+len(more)), &j.ID, &j.Queue, &j.Kind, &j.EncodedArgs, &state, &priority, &j.Attempt, &j.MaxAttempts,
		&j.Fence, &j.ScheduledAt, &j.CreatedAt, &attempted, &lease, &unique, &errs, &j.AttemptedBy, &meta, &tc)
	if err := row.Scan(append(dest, more...)...); err != nil {
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
	var err error
	if j.Metadata, err = decodeJobMetadata(meta, tc); err != nil {
		return nil, fmt.Errorf("job %d: decode metadata: %w", j.ID, err)
	}
	return &j, nil
}
