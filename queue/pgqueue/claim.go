package pgqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/queue"
)

// claimSQL claims up to $2 ready jobs of queue $1. SKIP LOCKED hands
// each row to one claimer only; the single nextval is this claim's fence.
// Its reply is a summary row (the job columns NULL, then the claim's
// fence, and the claimed jobs' IDs and the ctids of their new row
// versions, in the queue's order) and, for a small claim, the jobs' own
// rows (jobColumns, the summary's columns NULL). The jobs of a claim
// that is not small are read by claimedSQL after this statement has
// committed: a round trip more, which a worker that claims a few jobs at
// a time (jobs enqueued one by one, each wanted at once) would pay every
// job or two.
//
// The reply is bounded so that the server never waits on the claimer
// while the claim's locks are held: PostgreSQL sends a statement's rows as
// it makes them and commits only after the last is sent, so a claimer that
// stops reading (SIGSTOP, a paused VM, a black-holed network, a full
// socket buffer behind PgBouncer) while a reply of whole jobs (args,
// errors, metadata: megabytes for a claim of 1,000) is on its way would
// hold their row locks, with no lease to expire, for as long as it stayed
// silent. The summary is 22 bytes a job; the jobs' rows come only when
// there are at most $7 of them and claimRowBytes, which bounds a row's
// size on the wire from above, sums to at most $8 bytes over them
// (claimInlineBytes). A reply this size fits in the buffers of the
// sockets between the server and the claimer, so the server's writes
// complete and the claim commits whether or not anyone reads it
// (TestSilentSmallClaimer): its jobs then hold a lease, and a claim whose
// reply or fetch never reaches its claimer is rescued when that lease
// expires. A workflow task's row (depends_on set) comes in the reply only
// when its dependencies' traces are not wanted ($9 false): they have no
// bound here, and claimedSQL reads them. The
// update returns whole rows (u.job) only when it took at most $7 jobs, so
// that a large claim copies none.
//
// Within the statement no claim waits for another: rows are taken with
// SKIP LOCKED, the claim position (below) too (a claim that finds the
// position's row locked leaves it to the claim holding it). Claims take
// turns before the statement (claimTurnSQL), for a bounded wait.
//
// A paused queue (jobfence_queues.paused_at) yields nothing: the check is
// in the statement, so a claim whose snapshot was taken after PauseQueue
// committed takes no job, whatever its worker's view of the pause.
//
// It reads only available jobs, through the partial index
// jobfence_jobs_available (migration 00006), so its cost does not grow
// with the jobs waiting for a future time: scheduled jobs, retries in
// backoff and snoozes wait in jobfence_jobs_waiting until Promote makes
// them available. The scheduled_at bound only guards against an available
// row stamped in the future by hand; the index filters it without a heap
// visit.
//
// Up to three ranges of the index are read, in the order of the queue:
//   - hi: every priority band above the claim position's (lower numbers),
//     from its start. An urgent job that arrives into a backlog of
//     lower-priority work is taken by the next claim, whatever the
//     backlog; the cost is the entries of higher-priority jobs claimed
//     since the last VACUUM.
//   - lo: after the queue's claim position (b), the last job a claim of
//     the queue took (migration 00008), rather than at the index's start:
//     the entries of jobs claimed since the last VACUUM stay in the index,
//     dead, and a claim from the start walks every one of them (4,000 index
//     pages a claim halfway through a 1M-job burn-down; in a fleet, every
//     instance walked the jobs the others had claimed since its own last
//     claim). It reads from the start instead when no claim of the queue
//     did so for $5 microseconds, so a job of the position's own band that
//     sorts before it (an earlier time: a put-back, a promoted retry, a
//     transaction that committed late) waits at most that long. Which jobs
//     a claim takes never decides safety, fences do.
//   - wrap: when hi and lo found fewer than $2 jobs, the position's own
//     band up to the position, unless a claim of the queue read from the
//     start within $6 microseconds (w). A claim that would come back short
//     so looks before the position in the same statement: the jobs that
//     sort there are most often inserts whose transactions committed after
//     a later one's (many producers, each job wanted at once), and they
//     need not wait for the next claim. The interval keeps the instances of
//     a fleet whose queue runs dry from each walking the dead entries
//     before the position at every claim. The ranges do not overlap, so no
//     row is locked twice.
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
// it commits. The ctids come as an array, which makes a TID scan whatever
// the planner believes of next's size (joined to next, a generic plan that
// could not know the LIMIT hashed a sequential scan of the whole table;
// TestClaimPlan checks the generic plan). (If a concurrent committed update made the locked version
// newer than the statement's snapshot, the TID scan does not see it and
// the row is left unclaimed, its lock released at commit: a claim of
// fewer rows, never a wrong one.)
//
// A job's attempted_at is the claim statement's start, not its
// transaction's (which began before the wait for the turn): a rate limit
// counts starts by it (see grantSQL), and a start recorded up to a turn's
// wait early would free a rate slot that much early.
//
// The position moves on to the claim's last job. It moves back only when
// the claim started before it (from the queue's start, in a higher band,
// or in wrap) and took its whole limit: jobs before the position may
// remain, and the claims after this one go on from there, walking the dead
// entries between once rather than at every claim. After a full wrap that
// is wrap's last job: the jobs left are between it and the position.
//
// transition: claim
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
), paused AS MATERIALIZED (
    SELECT EXISTS (SELECT FROM jobfence_queues WHERE name = $1 AND paused_at IS NOT NULL) AS paused
), hi AS MATERIALIZED (
    SELECT id, ctid FROM jobfence_jobs
    WHERE state = 'available' AND queue = $1 AND scheduled_at <= now()
      AND priority < (SELECT priority FROM b)
      AND NOT (SELECT paused FROM paused)
    ORDER BY priority, scheduled_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), lo AS MATERIALIZED (
    SELECT id, ctid FROM jobfence_jobs
    WHERE state = 'available' AND queue = $1 AND scheduled_at <= now()
      AND (priority, scheduled_at, id) > ((SELECT priority FROM b), (SELECT scheduled_at FROM b), (SELECT id FROM b))
      AND NOT (SELECT paused FROM paused)
    ORDER BY priority, scheduled_at, id
    LIMIT $2 - (SELECT count(*) FROM hi)
    FOR UPDATE SKIP LOCKED
), w AS MATERIALIZED (
    SELECT NOT (SELECT head FROM b)
        AND (SELECT count(*) FROM hi) + (SELECT count(*) FROM lo) < $2
        AND NOT EXISTS (
            SELECT FROM jobfence_claim_hints
            WHERE queue = $1 AND head_at > now() - $6::bigint * interval '1 microsecond') AS wrap
), wrap AS MATERIALIZED (
    SELECT id, ctid FROM jobfence_jobs
    WHERE state = 'available' AND queue = $1 AND scheduled_at <= now()
      AND (priority, scheduled_at, id) <= ((SELECT priority FROM b), (SELECT scheduled_at FROM b), (SELECT id FROM b))
      AND priority >= (SELECT priority FROM b)
      AND (SELECT wrap FROM w)
      AND NOT (SELECT paused FROM paused)
    ORDER BY priority, scheduled_at, id
    LIMIT $2 - (SELECT count(*) FROM hi) - (SELECT count(*) FROM lo)
    FOR UPDATE SKIP LOCKED
), next AS MATERIALIZED (
    SELECT id, ctid FROM hi UNION ALL SELECT id, ctid FROM lo UNION ALL SELECT id, ctid FROM wrap
), f AS MATERIALIZED (
    SELECT nextval('jobfence_fence_seq') AS fence FROM (SELECT count(*) AS n FROM next) c WHERE c.n > 0
), u AS (
    UPDATE jobfence_jobs j
    SET state = 'running', attempt = j.attempt + 1, fence = f.fence,
        lease_expires_at = now() + $3::bigint * interval '1 microsecond',
        attempted_at = statement_timestamp(), attempted_by = j.attempted_by[greatest(array_length(j.attempted_by, 1) - 8, 1):] || $4::text
    FROM f
    WHERE j.ctid = ANY (ARRAY(SELECT ctid FROM next))
    RETURNING j.ctid, j.id, j.priority, j.scheduled_at, CASE WHEN (SELECT count(*) FROM next) <= $7 THEN j END AS job
), filled AS MATERIALIZED (
    SELECT (SELECT count(*) FROM next) >= $2 AS filled
), last AS (
    SELECT u.priority, u.scheduled_at, u.id,
        ((SELECT head FROM b) OR EXISTS (SELECT FROM hi) OR EXISTS (SELECT FROM wrap)) AND (SELECT filled FROM filled) AS back
    FROM u
    ORDER BY (EXISTS (SELECT FROM wrap) AND (SELECT filled FROM filled)
            AND (u.priority, u.scheduled_at, u.id) <= ((SELECT priority FROM b), (SELECT scheduled_at FROM b), (SELECT id FROM b))) DESC,
        u.priority DESC, u.scheduled_at DESC, u.id DESC
    LIMIT 1
), moved AS (
    UPDATE jobfence_claim_hints h
    SET priority = CASE WHEN l.back OR (h.priority, h.scheduled_at, h.id) < (l.priority, l.scheduled_at, l.id) THEN l.priority ELSE h.priority END,
        scheduled_at = CASE WHEN l.back OR (h.priority, h.scheduled_at, h.id) < (l.priority, l.scheduled_at, l.id) THEN l.scheduled_at ELSE h.scheduled_at END,
        id = CASE WHEN l.back OR (h.priority, h.scheduled_at, h.id) < (l.priority, l.scheduled_at, l.id) THEN l.id ELSE h.id END,
        head_at = CASE WHEN (SELECT head FROM b) OR (SELECT wrap FROM w) THEN now() ELSE h.head_at END
    FROM (SELECT) one LEFT JOIN last l ON true
    WHERE h.queue = $1 AND ((SELECT head FROM b) OR (SELECT wrap FROM w) OR l.id IS NOT NULL)
      AND h.queue IN (SELECT queue FROM jobfence_claim_hints WHERE queue = $1 FOR UPDATE SKIP LOCKED)
), added AS (
    INSERT INTO jobfence_claim_hints (queue, priority, scheduled_at, id, head_at)
    SELECT $1, coalesce(l.priority, -32768), coalesce(l.scheduled_at, '-infinity'), coalesce(l.id, 0), now()
    FROM (SELECT) one LEFT JOIN last l ON true
    WHERE NOT EXISTS (SELECT FROM jobfence_claim_hints WHERE queue = $1)
    ON CONFLICT (queue) DO NOTHING
)
SELECT ` + claimReplyNulls + `, (SELECT fence FROM f), array_agg(u.id ORDER BY u.priority, u.scheduled_at, u.id),
    array_agg(u.ctid ORDER BY u.priority, u.scheduled_at, u.id) FROM u
UNION ALL
SELECT ` + jobColumns + `, NULL, NULL, NULL FROM (SELECT (u.job).* FROM u) j
WHERE (SELECT count(*) FROM u) <= $7
  AND (SELECT (NOT $9::boolean OR bool_and(j.depends_on IS NULL)) AND sum(` + claimRowBytes + `) <= $8 FROM (SELECT (u.job).* FROM u) j)`

// claimedSQL reads the jobs that a claim ($2 the fence) took, by the
// ctids ($1) of the row versions the claim wrote: one heap visit a job
// rather than a descent of the primary key and a visit (a fifth of the
// buffers). A row updated since (a cancel) has moved and is read by ID
// instead (claimedByIDSQL). A claimer that stops reading the reply holds
// no lock here, only this statement's snapshot.
const claimedSQL = `SELECT ` + jobColumns + `, ` + dependencyTraces + ` FROM jobfence_jobs j
WHERE j.ctid = ANY($1) AND j.fence = $2 AND j.state = 'running'`

// claimedByIDSQL reads the jobs of a claim ($2 the fence) by ID ($1).
const claimedByIDSQL = `SELECT ` + jobColumns + `, ` + dependencyTraces + ` FROM jobfence_jobs j
WHERE j.id = ANY($1) AND j.fence = $2 AND j.state = 'running'`

// claimTurnSQL makes the claims of a queue take turns: run before claimSQL
// in one transaction, it waits until no other claim of the queue's turn $2
// holds the lock, and claimSQL's snapshot is taken after that claim
// committed. Claims that ran at once each passed over the rows the others
// held, which cost a CPU-bound fleet more than the wait (figures in
// docs/benchmarks/fleet.md). The lock decides only who claims first, never
// which job is whose: SKIP LOCKED and fences do that. No silent claimer
// can hold it: a claim commits without waiting for its claimer to read
// (claimSQL), and the wait is bounded by claimTurnWaitSQL.
const claimTurnSQL = `SELECT pg_advisory_xact_lock('jobfence_jobs'::regclass::oid::int, hashtext($1) # $2::int)`

// claimTurnWaitSQL bounds the wait for the turn by $1 milliseconds;
// claimTurnWaitResetSQL gives the claim itself the connection's own
// lock_timeout back, so that only a turn's wait ends in a claim beside it.
// The connection's value is kept in a setting of the transaction's own
// (jobfence.lock_timeout) rather than restored with SET LOCAL ... TO
// DEFAULT: the batch is a transaction, but not a transaction block, and
// SET LOCAL there made the server log a warning at every claim. A frozen
// holder of the turn holds up a claim claimTurnWait at most
// (TestClaimTurnWaitIsBounded holds the turn in an open transaction), and
// one stopped mid-batch is ended by EndStalledSessions
// (TestStalledSessionIsEnded); TestClaimTurnLeavesNoWarning checks the
// bound and its restore.
const (
	claimTurnWaitSQL = `SELECT set_config('jobfence.lock_timeout', current_setting('lock_timeout'), true),
    set_config('lock_timeout', $1::bigint::text, true)`
	claimTurnWaitResetSQL = `SELECT set_config('lock_timeout', current_setting('jobfence.lock_timeout'), true)`
)

// claimRowBytes bounds from above the size on the wire of a claimed job's
// row (jobColumns of u, alias j, with the summary's NULLs): the variable
// columns' lengths (a jsonb's binary form is its text and a version byte;
// a text array's element costs its length and 8 bytes of header at most,
// a bigint array's 21 bytes, its text form's longest, and 24 for the
// array's header), and 400 bytes for the row's header, the columns'
// lengths and the fixed-size columns (about 260).
const claimRowBytes = `octet_length(j.queue) + octet_length(j.kind) + octet_length(j.args::text) + octet_length(j.errors::text)
        + octet_length(j.metadata::text) + coalesce(octet_length(j.output::text), 0) + coalesce(octet_length(j.unique_key), 0)
        + coalesce(octet_length(j.task_name), 0) + coalesce(octet_length(j.trace_context), 0)
        + coalesce(octet_length(j.limit_name), 0) + coalesce(octet_length(j.limit_part), 0)
        + coalesce(octet_length(array_to_string(j.attempted_by, '')), 0) + 8 * coalesce(cardinality(j.attempted_by), 0)
        + coalesce(21 * cardinality(j.depends_on) + 24, 0) + 400`

// claimReplyNulls fills the job columns of the claim's summary row: one
// NULL for each of jobColumns.
const claimReplyNulls = `NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL`

// dependencyTraces reads, for a claimed workflow task, the run traces of
// its first $3 dependencies (queue.Job.DependencyTraces, at most
// queue.MaxDependencyTraces; 0 when the claimer does not want them): a
// primary-key probe each, for a workflow task only.
const dependencyTraces = `CASE WHEN j.depends_on IS NOT NULL AND $3::int > 0 THEN ARRAY(
    SELECT convert_from(d.run_trace, 'UTF8') FROM jobfence_jobs d
    WHERE d.id = ANY(j.depends_on[1:$3::int]) AND d.run_trace IS NOT NULL ORDER BY d.id) END`

// jobColumns are the columns scanJob reads, in order.
const jobColumns = `j.id, j.queue, j.kind, j.args, j.state, j.priority, j.attempt, j.max_attempts, j.fence,
    j.scheduled_at, j.created_at, j.attempted_at, j.lease_expires_at, j.unique_key, j.errors, j.attempted_by, j.metadata, j.trace_context,
    j.idempotency_key, j.deadline, j.timeout_us, j.output, j.workflow_id, j.task_name, j.depends_on, j.limit_name, j.limit_part,
    cardinality(j.dependents)`

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
	jobs, took, err := c.claim(ctx, p.Queue, turn, p.DependencyTraces, claimArgs(p, pace)...)
	if err != nil {
		return nil, err
	}
	pace.claimed(took)
	return jobs, nil
}

// claimArgs are claimSQL's arguments for p, its queue paced by pace.
func claimArgs(p queue.ClaimParams, pace *claimPace) []any {
	return []any{p.Queue, p.Limit, p.Lease.Microseconds(), p.WorkerID, pace.headInterval().Microseconds(),
		pace.headRetryInterval().Microseconds(), claimInlineJobs, claimInlineBytes, p.DependencyTraces}
}

// claim takes turn (claimTurnSQL), runs claimSQL, then, unless the reply
// held them, claimedSQL for the jobs it took (with their dependencies'
// traces if traces), and reports how long it took
// from its turn on (the wait for the turn is not the claim's cost: counted
// in, a fleet's claims seemed slow and read from the start only every few
// seconds). A claim that waited claimTurnWait for its turn runs without it.
func (c *Client) claim(ctx context.Context, q string, turn int, traces bool, args ...any) (jobs []*queue.Job, took time.Duration, err error) {
	fail := func(err error) ([]*queue.Job, time.Duration, error) {
		return nil, 0, fmt.Errorf("pgqueue: claim from %q: %w", q, err)
	}
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return fail(err)
	}
	defer conn.Release()
	var reply claimReply
	began := time.Now()
	// One batch is one transaction: the turn is held until the claim
	// commits, which it does without waiting for this client to read.
	var b pgx.Batch
	b.Queue(claimTurnWaitSQL, claimTurnWait.Milliseconds())
	b.Queue(claimTurnSQL, q, turn)
	b.Queue(claimTurnWaitResetSQL)
	b.Queue(claimSQL, args...)
	br := conn.SendBatch(ctx, &b)
	_, err = br.Exec()
	if err == nil {
		_, err = br.Exec()
		began = time.Now()
	}
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			err = reply.read(rows)
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
		// The turn's holder is slow or stuck: claim beside it.
		began = time.Now()
		reply = claimReply{}
		var rows pgx.Rows
		if rows, err = conn.Query(ctx, claimSQL, args...); err == nil {
			err = reply.read(rows)
		}
	}
	if err != nil {
		return fail(err)
	}
	if reply.fence == nil || len(reply.ids) == 0 {
		return nil, time.Since(began), nil
	}
	// From here the jobs are ours, leased: if a read fails, they are
	// rescued when the lease expires, as the jobs of a claimer that died.
	if jobs, err = reply.jobsVia(ctx, conn, traces); err != nil {
		return fail(err)
	}
	return jobs, time.Since(began), nil
}

// claimReply is what claimSQL's reply says: the summary row's fence, IDs
// and ctids, and the jobs' rows when the claim was small enough to send
// them.
type claimReply struct {
	fence *int64
	ids   []int64
	ctids []pgtype.TID
	jobs  map[int64]*queue.Job
}

// jobsVia returns the claim's jobs in its order, which the reply's arrays
// keep: their rows as the reply held them, or, when it held fewer than
// the claim took, all of them read after the commit through conn
// (readClaimed), with their dependencies' traces if traces. conn is not
// used when the reply held every row.
func (r *claimReply) jobsVia(ctx context.Context, conn *pgxpool.Conn, traces bool) ([]*queue.Job, error) {
	byID := r.jobs
	if len(byID) < len(r.ids) {
		var err error
		if byID, err = readClaimed(ctx, conn, *r.fence, r.ids, r.ctids, traces); err != nil {
			return nil, err
		}
	}
	jobs := make([]*queue.Job, 0, len(r.ids))
	for _, id := range r.ids {
		if j := byID[id]; j != nil {
			jobs = append(jobs, j)
		}
	}
	return jobs, nil
}

// read reads claimSQL's rows: the summary row is the one without a job
// ID, whatever its place among the jobs' rows.
func (r *claimReply) read(rows pgx.Rows) error {
	defer rows.Close()
	summary := make([]any, claimJobColumns, claimJobColumns+3)
	summary = append(summary, &r.fence, &r.ids, &r.ctids)
	for rows.Next() {
		if rows.RawValues()[0] == nil {
			if err := rows.Scan(summary...); err != nil {
				return err
			}
			continue
		}
		j, err := scanJob(rows, nil, nil, nil)
		if err != nil {
			return err
		}
		if r.jobs == nil {
			r.jobs = make(map[int64]*queue.Job)
		}
		r.jobs[j.ID] = j
	}
	return rows.Err()
}

// claimJobColumns is how many of jobColumns scanJob reads.
const claimJobColumns = 28

// readClaimed reads the jobs (ids, their row versions ctids) that a claim
// under fence took, after it committed: by ctid, and by ID those whose
// row has moved since; with traces, a task's dependencies' traces too.
func readClaimed(ctx context.Context, conn *pgxpool.Conn, fence int64, ids []int64, ctids []pgtype.TID, traces bool) (map[int64]*queue.Job, error) {
	byID := make(map[int64]*queue.Job, len(ids))
	maxTraces := 0
	if traces {
		maxTraces = queue.MaxDependencyTraces
	}
	read := func(sql string, keys any) error {
		rows, err := conn.Query(ctx, sql, keys, fence, maxTraces)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var traces []string
			j, err := scanJob(rows, &traces)
			if err != nil {
				return err
			}
			j.DependencyTraces = traces
			byID[j.ID] = j
		}
		return rows.Err()
	}
	if err := read(claimedSQL, ctids); err != nil {
		return nil, err
	}
	if len(byID) < len(ids) {
		var moved []int64
		for _, id := range ids {
			if byID[id] == nil {
				moved = append(moved, id)
			}
		}
		if err := read(claimedByIDSQL, moved); err != nil {
			return nil, err
		}
	}
	return byID, nil
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
		j          queue.Job
		state      string
		priority   int16
		attempted  *time.Time
		lease      *time.Time
		unique     *string
		errs       []byte
		meta, tc   []byte
		key        pgtype.UUID
		deadline   *time.Time
		timeout    *int64
		output     []byte
		workflow   pgtype.UUID
		task       *string
		limName    *string
		limPart    *string
		dependents *int32
	)
	// One slice, sized for more too: appending more to a literal of
	// exactly the columns would copy it, a second allocation for every job
	// a claim returns.
	dest := append(make([]any, 0, claimJobColumns+len(more)), &j.ID, &j.Queue, &j.Kind, &j.EncodedArgs, &state, &priority, &j.Attempt, &j.MaxAttempts,
		&j.Fence, &j.ScheduledAt, &j.CreatedAt, &attempted, &lease, &unique, &errs, &j.AttemptedBy, &meta, &tc,
		&key, &deadline, &timeout, &output, &workflow, &task, &j.DependsOn, &limName, &limPart, &dependents)
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
	j.Key = jobKey(key)
	if deadline != nil {
		j.Deadline = *deadline
	}
	j.Timeout = jobTimeout(timeout)
	if output != nil {
		j.Output = output
	}
	if workflow.Valid {
		j.WorkflowID = uuidString(workflow)
	}
	if task != nil {
		j.TaskName = *task
	}
	if limName != nil && limPart != nil {
		j.Limit, j.LimitPartition = *limName, *limPart
	}
	if dependents != nil {
		j.Dependents = int(*dependents)
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
