package pgqueue

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
)

// completeSQL is the hot path: complete many jobs, each only under its fence.
//
// It, finishSQL, heartbeatSQL and rescueSQL read their arrays through
// scalar sub-selects, (SELECT $1::bigint[]), which hide the arrays' length
// from the planner, so that it probes the primary key once per ID, in
// the IDs' (ascending) order. A statement planned for its parameters (every
// statement through PgBouncer, where pgx sends unnamed statements, and the
// first five runs of a prepared one) otherwise saw 1,000 IDs and trusted
// statistics taken while no job was running (the table's last ANALYZE,
// before a burst of claims): it scanned the whole table and compared
// every running row with every ID, hundreds of times slower than the
// probes (docs/benchmarks/code.md). A fleet's every statement then waited behind
// such batches, and rows locked in the table's order instead of the IDs'
// could deadlock with a heartbeat. At the default estimate of 10
// elements the plan is the one a prepared statement's generic plan uses.
// The probes win from a few thousand rows on. A table of a few hundred
// is scanned, its rows locked in the table's order, by completeSQL and
// heartbeatSQL alike (checked with 20 and 300 running jobs; with 3,000
// both probe), so the two still lock in one order.
//
// The output ($3) and a workflow task's run trace ($4) are written by the
// same fenced statement: an attempt whose fence is stale stores neither.
//
// The jobs are locked first (l), in the IDs' order, as the fenced
// probes find them; the statement then moves each completed job whose row
// leaves the jobs table (leavesSQL) into jobfence_jobs_finished, or
// deletes it (DeleteOnComplete), and completes the others in place. Both
// touch only rows l has locked, so rows are locked in ascending ID order
// whatever the order in which the two run (see Finish).
//
// transition: complete
const completeSQL = `
WITH f AS (
    SELECT * FROM unnest((SELECT $1::bigint[]), (SELECT $2::bigint[]), (SELECT $3::jsonb[]), (SELECT $4::bytea[]))
        AS f(id, fence, output, trace)
), l AS (
    SELECT j.id, f.output, f.trace, ` + leavesSQL + ` AS leaves, coalesce(j.delete_on_complete, false) AS drop_it
    FROM jobfence_jobs j JOIN f ON j.id = f.id AND j.fence = f.fence
    WHERE j.state = 'running'
    FOR UPDATE OF j
), ` + moveFinishedSQL + `, kept AS (
    UPDATE jobfence_jobs j
    SET state = 'completed', finalized_at = now(), lease_expires_at = NULL, output = l.output, run_trace = l.trace
    FROM l
    WHERE j.id = l.id AND NOT l.leaves AND j.state = 'running'
    RETURNING j.id, j.fence, j.limit_name, j.limit_part
)` + finishedReturnSQL

// finishSQL applies any mix of outcomes (1 complete, 2 retry, 3 discard,
// 4 snooze, 5 cancel), each only under its fence. A retry out of attempts
// becomes a discard; a snooze gives its attempt back. A retry waits as
// retryable, and a snooze with a delay as scheduled, until Promote makes
// it available (a failed job stays recognisable as one meanwhile); a
// snooze without a delay (a put-back: a stopping worker, an unknown
// kind's first time) is Ready at once (readySQL): available, or limited,
// its slot given up, where a limit governs it, so that it starts again
// only through a grant, which takes a rate slot for the new start and
// counts a lowered limit (TestPutBackTakesARateSlot). A snooze with a
// delay keeps its slot while scheduled if its limit holds slots through
// retries (holdingSQL), so that no later job of a sequence overtakes it
// (TestSnoozeKeepsASequenceInOrder).
//
// transition: complete, retry, discard, snooze, cancel, backoff, suspend
//
// A snooze that awaits a signal ($9, queue.Finish.Await: a handler's
// AwaitSignal) records the name it awaits (awaiting), which the
// promoter's sweep and a Signal's wake read; it is Ready at once if such
// a signal is there already, undelivered: one stored before the job
// suspended, which no sweep would see (the job was running).
//
// An outcome with a backoff ($8, microseconds; queue.Finish.Backoff: a
// handler's JobRateLimited) pushes its partition's backoff (every slot
// row's backoff_until, see openSQL) to at least that long from now, so
// that no grant hands the partition a slot until then; a later one
// extends it, an earlier one leaves it (greatest). The rows are slots of
// the applied outcomes' own partitions (l holds only those), so a stale
// outcome backs nothing off; a batch with no backoff reads none. They are
// locked first (bs), in key order (so that two batches lock them in one
// order), each partition's found by its key, then
// updated by their row versions, as handOverSQL updates its slots: a
// join of the slots to the outcomes let a plan read the whole slots
// table. A grant holds a slot's lock for one statement, so the wait is
// one grant's at most.
//
// A retry or a snooze that would make the job ready after its deadline
// (late) discards it instead, with the reason appended to its errors after
// the attempt's own: the worker decides so by its clock already (see
// worker's reportRun), and this is the database's clock's say, so that a
// worker whose clock runs slow cannot schedule an attempt past the
// deadline.
//
// A completion whose row leaves the jobs table moves (or is deleted) as
// in completeSQL; every other outcome is applied in place.
var finishSQL = `
WITH f AS (
    SELECT * FROM unnest((SELECT $1::bigint[]), (SELECT $2::bigint[]), (SELECT $3::smallint[]),
        (SELECT $4::bigint[]), (SELECT $5::jsonb[]), (SELECT $6::jsonb[]), (SELECT $7::bytea[]), (SELECT $8::bigint[]),
        (SELECT $9::text[]))
        AS f(id, fence, outcome, delay, err, output, trace, backoff, await)
), l AS (
    SELECT j.id, f.delay, f.err, f.outcome, f.output, f.trace, f.await, ` + finishLate + ` AS late,
        j.limit_name, j.limit_part, f.backoff,
        CASE WHEN ` + finishLate + ` THEN 'discarded' ELSE CASE f.outcome
            WHEN 1 THEN 'completed'
            WHEN 2 THEN CASE WHEN j.attempt >= j.max_attempts THEN 'discarded' ELSE 'retryable' END
            WHEN 3 THEN 'discarded'
            WHEN 4 THEN CASE WHEN f.delay > 0 AND (f.await IS NULL OR NOT EXISTS (
                    SELECT FROM jobfence_signals g WHERE g.job_id = j.id AND g.name = f.await AND g.delivered_at IS NULL))
                THEN 'scheduled' ELSE ` + readySQL("j.limit_name") + ` END
            WHEN 5 THEN 'cancelled'
        END END AS state,
        f.outcome = 1 AND ` + leavesSQL + ` AS leaves, coalesce(j.delete_on_complete, false) AS drop_it
    FROM jobfence_jobs j JOIN f ON j.id = f.id AND j.fence = f.fence
    WHERE j.state = 'running'
    FOR UPDATE OF j
), ` + moveFinishedSQL + `, kept AS (
    UPDATE jobfence_jobs j
    SET state = l.state,
        scheduled_at = CASE WHEN l.state IN ('retryable', 'scheduled') THEN now() + l.delay * interval '1 microsecond'
                            WHEN l.state IN ('available', 'limited') THEN now() ELSE j.scheduled_at END,
        limit_slot = CASE WHEN l.state = 'limited' THEN NULL ELSE j.limit_slot END,
        attempt = CASE WHEN l.outcome = 4 THEN j.attempt - 1 ELSE j.attempt END,
        errors = CASE WHEN l.err IS NULL THEN j.errors ELSE j.errors || jsonb_build_array(l.err) END
            || CASE WHEN l.late THEN ` + lateAgainErrorSQL("l.delay") + ` ELSE '[]'::jsonb END,
        finalized_at = CASE WHEN l.state IN ('completed', 'discarded', 'cancelled') THEN now() END,
        lease_expires_at = NULL,
        output = CASE WHEN l.state = 'completed' THEN l.output ELSE j.output END,
        run_trace = CASE WHEN l.state = 'completed' THEN l.trace ELSE j.run_trace END,
        awaiting = CASE WHEN l.state = 'scheduled' THEN l.await END
    FROM l
    WHERE j.id = l.id AND NOT l.leaves AND j.state = 'running'
    RETURNING j.id, j.fence, j.limit_name, j.limit_part
), bs AS MATERIALIZED (
    SELECT x.ctid AS sctid, b.us FROM (
        SELECT l.limit_name, l.limit_part, max(l.backoff) AS us FROM l
        WHERE l.backoff > 0 AND l.limit_name IS NOT NULL GROUP BY l.limit_name, l.limit_part
        ORDER BY l.limit_name, l.limit_part) b
    CROSS JOIN LATERAL (
        SELECT s.ctid FROM jobfence_limit_slots s WHERE s.name = b.limit_name AND s.part = b.limit_part
        ORDER BY s.kind, s.slot FOR UPDATE) x
), bo AS (
    UPDATE jobfence_limit_slots s
    SET backoff_until = greatest(s.backoff_until, now() + bs.us * interval '1 microsecond')
    FROM bs
    WHERE s.ctid = ANY (ARRAY(SELECT sctid FROM bs)) AND s.ctid = bs.sctid
)` + finishedReturnSQL

// Finish implements queue.Backend in one statement: completeSQL when every
// outcome is a completion (the hot path), finishSQL otherwise. A job absent
// from the update was fenced out and its lease is returned as stale. The
// slots that the applied outcomes of limited jobs freed go to the next
// waiting jobs of their partitions at once: sent with the outcomes, in
// their round trip, for the partitions the Finishes name (finishAndGrant:
// those of a limit with no rate in the outcomes' transaction, the others'
// in one of its own), after them for the others (grant). A failed grant
// of its own leaves them to the workers' next grant pass.
// When the batch holds workflow tasks, releaseSQL follows the outcomes in
// the same transaction (see finishBatch).
func (c *Client) Finish(ctx context.Context, fs []queue.Finish) ([]queue.Lease, error) {
	stale, _, err := c.finish(ctx, fs, nil)
	return stale, err
}

// FinishClaim implements queue.FinishClaimer: it applies fs as Finish
// does and, in the same round trip, claims for the caller the jobs
// granted the slots of concurrency limits and sequences (no rate)
// that the applied outcomes of fs marked ClaimNext freed: one at most per
// such Finish, in the partition it names, only into a slot this call's
// own outcomes freed (a stale outcome, a zombie's, frees none and claims
// nothing), never from a paused queue, and finishClaimJobs at most over
// these and the dependents below. As a claim's, the batch's reply holds the rows
// of a few of them (claimInlineJobs, claimInlineBytes) and the IDs of the
// rest, whose rows are read after the batch commits (claimedJobs).
// The jobs come back running, fenced (a fence drawn after their rows are
// locked), leased for p.Lease and their attempt counted, as Claim's do;
// the grant makes the others available as Finish does. A slot went
// round in three round trips in a row (the outcome and its grant, the
// grant's wake-up of a fetch loop, that loop's claim); claimed here it
// goes round in one.
//
// With p.Slots, the completions of workflow tasks also claim, for the
// caller, the dependents their release makes ready, into the slots it
// reserves (see releaseClaimSQL and releaseRange); those go to p.Slots'
// Fill, not to the jobs returned.
func (c *Client) FinishClaim(ctx context.Context, fs []queue.Finish, p queue.FinishClaimParams) ([]queue.Lease, []*queue.Job, error) {
	return c.finish(ctx, fs, &p)
}

// finish is Finish, claiming as FinishClaim does when p is not nil.
func (c *Client) finish(ctx context.Context, fs []queue.Finish, p *queue.FinishClaimParams) ([]queue.Lease, []*queue.Job, error) {
	if len(fs) == 0 {
		return nil, nil, nil
	}
	// Rows are locked in ascending ID order, in one statement: Heartbeat
	// locks in the same order, so a worker's heartbeat and completers never
	// deadlock on the jobs they share.
	sorted := slices.Clone(fs)
	slices.SortFunc(sorted, func(a, b queue.Finish) int { return cmp.Compare(a.ID, b.ID) })
	onlyCompletions := true
	for _, f := range sorted {
		if f.Outcome < queue.OutcomeComplete || f.Outcome > queue.OutcomeCancel {
			return nil, nil, fmt.Errorf("pgqueue: finish job %d: invalid outcome %d", f.ID, f.Outcome)
		}
		onlyCompletions = onlyCompletions && f.Outcome == queue.OutcomeComplete && f.Backoff <= 0
	}
	ids := make([]int64, len(sorted))
	fences := make([]int64, len(sorted))
	outputs := make([][]byte, len(sorted))
	traces := make([][]byte, len(sorted))
	var tasks []int64
	for i, f := range sorted {
		ids[i], fences[i] = f.ID, f.Fence
		if f.Outcome == queue.OutcomeComplete && f.Output != nil {
			outputs[i] = jsonbOutput(f.Output)
		}
		if f.Workflow {
			tasks = append(tasks, f.ID)
			traces[i] = f.Trace
		}
	}
	sql, args := completeSQL, []any{ids, fences, outputs, traces}
	if !onlyCompletions {
		outcomes := make([]int16, len(sorted))
		delays := make([]int64, len(sorted))
		backoffs := make([]int64, len(sorted))
		errs := make([][]byte, len(sorted))
		awaits := make([]*string, len(sorted))
		for i, f := range sorted {
			outcomes[i], delays[i] = int16(f.Outcome), max(f.Delay, 0).Microseconds()
			if f.Outcome == queue.OutcomeSnooze && f.Await != "" {
				awaits[i] = &f.Await
			}
			backoffs[i] = max(f.Backoff, 0).Microseconds()
			if f.Error != nil {
				b, err := json.Marshal(jsonbSafe(*f.Error))
				if err != nil {
					return nil, nil, fmt.Errorf("pgqueue: finish: encode error: %w", err)
				}
				errs[i] = b
			}
		}
		sql, args = finishSQL, []any{ids, fences, outcomes, delays, errs, outputs, traces, backoffs, awaits}
	}
	// The grant goes out with the outcomes (finishAndGrant), in the
	// partitions the claim gave, unless a workflow task's discard or
	// cancel among them needs the release's passes (finishBatch); the
	// partitions the outcomes returned beside them are granted after.
	held, limited := heldPartitions(sorted)
	var caps *concClaim
	grantIn := len(held) > 0 && (len(tasks) == 0 || onlyCompletions)
	if grantIn {
		caps = claimCaps(sorted, p)
	}
	// With Slots, the completed tasks' releases claim the dependents
	// they make ready for the caller (see releaseClaimSQL), within what
	// the grant's claims leave of the batch's bound.
	var dc *dependentsClaim
	if len(tasks) > 0 {
		dc = c.reserveDependents(sorted, p, !onlyCompletions, finishClaimJobs-caps.total())
	}
	sent := time.Now()
	var fg finishGrant
	var err error
	if grantIn {
		fg, err = c.finishAndGrant(ctx, sql, args, tasks, limited, held, caps, dc)
		fg.lims = append(without(fg.lims, held), fg.declined...)
	} else {
		fg, err = c.finishBatch(ctx, sql, args, tasks, dc)
	}
	applied, lims, claimed := fg.applied, fg.lims, fg.claimed
	if dc != nil {
		c.fill(ctx, dc, dc.reserved, fg.released, sent)
	}
	if err == nil {
		c.cascadeAfterCommit(ctx, fg.cascades)
		c.releaseLater(ctx, fg.more, dc)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("pgqueue: finish %d jobs: %w", len(fs), err)
	}
	// Only an outcome that applied can have freed a slot: a stale one
	// (a zombie's) changed nothing, so it frees nothing either.
	c.grantAfter(ctx, lims)
	var stale []queue.Lease
	for _, f := range fs {
		if !applied[f.Lease] {
			stale = append(stale, f.Lease)
		}
	}
	return stale, claimed, nil
}

// finishBatch runs a finish statement and returns the leases it applied,
// and the completed tasks whose dependents it left to release after the
// commit (see releaseRangeSQL). With workflow tasks among the jobs,
// releaseSQL follows it in the same transaction: the dependents a
// completion releases become available with it, under its fence, or not
// at all. The release is a statement of its own because it must see what
// committed while the finish waited for its rows (a task added meanwhile
// that depends on one of them: see workflow's dynamic tasks); a statement
// sees only what had committed when it began. The transaction is bounded
// (boundedTx): a client frozen between the two statements holds their
// rows txbound.Idle at most.
//
// With dc's slots reserved, the completions' release claims for the caller
// (releaseClaimSQL); what it claimed is in the result's released, which
// the caller fills the slots with (fill), whatever the error.
func (c *Client) finishBatch(ctx context.Context, sql string, args []any, tasks []int64, dc *dependentsClaim) (finishGrant, error) {
	applied := make(map[queue.Lease]bool, len(args[0].([]int64)))
	var lims partitionSet
	run := func(db DB) error {
		rows, err := db.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		return scanFinished(rows, applied, &lims)
	}
	if len(tasks) == 0 {
		err := run(c.pool)
		return finishGrant{applied: applied, lims: lims.list}, err
	}
	if sql == completeSQL {
		// Completions cascade nothing: the release goes in their round
		// trip, as a grant does (finishAndGrant, with no partition).
		return c.finishAndGrant(ctx, sql, args, tasks, nil, nil, nil, dc)
	}
	var r released
	err := c.boundedTx(ctx, func(tx pgx.Tx) error {
		if err := run(tx); err != nil {
			return err
		}
		// Only finishSQL can discard or cancel.
		var err error
		r, err = release(ctx, tx, tasks, sql == finishSQL, c.cfg.ReleaseChunk, "")
		return err
	})
	if err != nil {
		return finishGrant{}, err
	}
	c.wakeReady(ctx, r.ready)
	return finishGrant{applied: applied, lims: lims.list, more: r.more}, nil
}

// boundedTx runs fn in a transaction bounded as EnqueueMany's is
// (boundedBegin) and commits it if fn succeeds.
func (c *Client) boundedTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return c.txFrom(ctx, boundedBegin, fn)
}

// txFrom runs fn in a transaction begun by begin (which sets its bounds)
// and commits it if fn succeeds.
func (c *Client) txFrom(ctx context.Context, begin string, fn func(tx pgx.Tx) error) error {
	tx, err := c.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: begin})
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// jsonbOutput makes recorded output storable as jsonb, which refuses a
// NUL (\u0000) in a string: one handler's output must not fail a batch of
// other jobs' outcomes, so NULs become U+FFFD, as in jsonbSafe. Output
// without the escape, nearly all, is passed as it is.
func jsonbOutput(b []byte) []byte {
	if !bytes.Contains(b, []byte(`\u0000`)) {
		return b
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return b
	}
	out, err := json.Marshal(replaceNUL(v))
	if err != nil {
		return b
	}
	return out
}

// replaceNUL replaces the NULs in v's strings and keys.
func replaceNUL(v any) any {
	switch v := v.(type) {
	case string:
		return strings.ReplaceAll(v, "\x00", "\uFFFD")
	case []any:
		for i := range v {
			v[i] = replaceNUL(v[i])
		}
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[strings.ReplaceAll(k, "\x00", "\uFFFD")] = replaceNUL(e)
		}
		return m
	}
	return v
}

// jsonbSafe replaces the NUL characters jsonb refuses: one handler's error
// text must not fail a batch of other jobs' outcomes.
func jsonbSafe(e queue.AttemptError) queue.AttemptError {
	e.Error = strings.ReplaceAll(e.Error, "\x00", "\uFFFD")
	e.Trace = strings.ReplaceAll(e.Trace, "\x00", "\uFFFD")
	return e
}

// Complete completes one job under its fence; it returns a
// *queue.StaleFenceError (errors.Is ErrStaleFence) when the fence is stale,
// and then the row is unchanged.
func (c *Client) Complete(ctx context.Context, l queue.Lease) error {
	stale, err := c.Finish(ctx, []queue.Finish{{Lease: l, Outcome: queue.OutcomeComplete}})
	if err != nil {
		return err
	}
	if len(stale) > 0 {
		return &queue.StaleFenceError{Lease: l}
	}
	return nil
}

// heartbeatSQL extends leases; its arrays are read as completeSQL's are.
//
// transition: heartbeat
const heartbeatSQL = `
UPDATE jobfence_jobs j SET lease_expires_at = now() + $3::bigint * interval '1 microsecond'
FROM unnest((SELECT $1::bigint[]), (SELECT $2::bigint[])) AS l(id, fence)
WHERE j.id = l.id AND j.fence = l.fence AND j.state = 'running'
RETURNING j.id`

// Heartbeat implements queue.Backend: it extends each lease that is still
// current by d and returns the others, whose jobs the caller lost.
func (c *Client) Heartbeat(ctx context.Context, leases []queue.Lease, d time.Duration) ([]queue.Lease, error) {
	if len(leases) == 0 {
		return nil, nil
	}
	// Ascending ID order, as Finish locks them: see Finish.
	sorted := slices.Clone(leases)
	slices.SortFunc(sorted, func(a, b queue.Lease) int { return cmp.Compare(a.ID, b.ID) })
	ids := make([]int64, len(sorted))
	fences := make([]int64, len(sorted))
	for i, l := range sorted {
		ids[i], fences[i] = l.ID, l.Fence
	}
	rows, err := c.pool.Query(ctx, heartbeatSQL, ids, fences, d.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("pgqueue: heartbeat: %w", err)
	}
	kept := make(map[int64]bool, len(leases))
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("pgqueue: heartbeat: %w", err)
		}
		kept[id] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgqueue: heartbeat: %w", err)
	}
	var lost []queue.Lease
	for _, l := range leases {
		if !kept[l.ID] {
			lost = append(lost, l)
		}
	}
	return lost, nil
}
