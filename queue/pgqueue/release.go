package pgqueue

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// releaseSQL releases the dependents of the workflow tasks among $1 that
// this transaction has just ended: the statement before it in the same
// transaction (a batch's finish, a transactional handler's completion, a
// rescue, a cancel) made them final. xmin = the transaction's ID picks the
// rows this transaction wrote, so a task that some other transaction ended
// (its fence was stale here, or it was cancelled before) releases nothing
// again: only the outcome that was accepted under the task's fence
// releases, once.
//
// A task that ended before and runs again (Retry, RetryForce) has
// released the first dependents_released entries of its list then: its
// new end releases only the entries after them (off), so that a
// dependent counts each dependency's end once.
//
// For each task it ended:
//   - completed: every pending dependent among the first $2 of its list
//     (the rest are recorded as ranges of $2, released after the commit:
//     see releaseRangeSQL) gets one dependency fewer
//     (deps_left), and becomes available at zero (or scheduled, if its
//     time is still to come, or limited, if a limit governs it: the
//     limits' grant gives it a slot, as to any other job). A task that no
//     limit governed when it was inserted, of a queue (and kind) that has
//     one now, comes under it as it is released (adopt, promoteSQL's
//     rule), as SetLimit brings available jobs under it: a limit set
//     while a workflow waits governs its tasks too. The probe of the
//     limits runs only when some limit exists (the uncorrelated EXISTS is
//     evaluated once), so a release with no limits pays nothing for it.
//   - discarded or cancelled: its pending dependents are cancelled, with
//     the reason recorded, and so are theirs in turn (the recursive cx);
//     a dependent marked run_anyway or run_on_failure is not, and counts
//     the dependency as ended, as a completion does (run_on_failure
//     records the failure: see releaseLockTail).
//   - a run_on_failure dependent whose last dependency ends with none of
//     them failed is cancelled (noFailureReason), and recorded for the
//     cascade of its own dependents (cq, replied as 'cascade' rows: see
//     cascade.go).
//
// The conditions on the tasks ended are applied above an OFFSET 0, which
// keeps them from being pushed down to the scan: there they matched the
// predicate of jobfence_jobs_finalized, and the planner read every final
// job through that index rather than probe the primary key per ID.
//
// The planner cannot know how many dependents a release has: it guesses
// 200 rows for a CTE. With that guess it scanned a table of some thousands
// of rows (to lock the dependents, then to update them) rather than probe
// it per dependent, and with a guess of a few rows it may join a CTE in a
// nested loop, which compares each of a fan-out's 10,000 dependents with
// every other. So no step depends on the guess: the closure and the lock
// reach the jobs through LATERAL subqueries, which can only run as one
// probe per outer row, and the update joins the jobs to the locked rows as
// arrays, aggregated into one row (a) and unnested, which the planner
// takes for 10 rows and probes (a table of a few pages, it may hash). A
// release of any size reads a few rows and buffers per dependent
// (TestReleaseOfAFanOutIsLinear, TestReleaseCostIndependentOfSize).
//
// The cost is one primary-key probe per dependent: a fan-in's counter row
// is updated once per batch that completes some of its dependencies,
// whatever the size of the workflow or of the table. Dependents are
// locked in ascending ID order, as Finish locks its jobs; they are pending
// rows, which no claim, heartbeat or rescue locks, and each statement
// holds them only while the server runs it. The reply is a row per queue
// that dependents became available in, whose workers the caller wakes
// once the transaction has committed (wakeReady), and one per completed
// task with ranges recorded (its ID). Only in a caller's own transaction
// (FinishTx), which commits without this client, does channel $3 name
// the channel that the release notifies itself (it is empty
// otherwise), as EnqueueTx's insert does.
//
// transition: release
var releaseSQL = releaseClosure + releaseUpdateTail + releaseRangesRecorded + `
SELECT r.queue, NULL::bigint, CASE WHEN $3 <> '' THEN pg_notify($3, r.queue)::text END
FROM (SELECT DISTINCT queue FROM u WHERE u.state = 'available') r
UNION ALL
SELECT NULL, task_id, NULL FROM (SELECT DISTINCT task_id FROM rs) r
UNION ALL
SELECT NULL, task_id, 'cascade' FROM cq`

// releaseRangesRecorded records, as rs, the ranges of the completed tasks'
// dependents past the first $2, for after the commit (releaseRangeSQL).
const releaseRangesRecorded = `, rs AS (
    INSERT INTO jobfence_releases (task_id, first, last)
    SELECT d.id, g.first, least(g.first + $2 - 1, cardinality(d.dependents))
    FROM done d CROSS JOIN LATERAL generate_series(d.off + $2 + 1, cardinality(d.dependents), $2) AS g(first)
    WHERE d.state = 'completed'
    ON CONFLICT DO NOTHING
    RETURNING task_id
)`

// releaseUpdateTail changes the dependents that l locked (see releaseSQL)
// and returns them as u.
var releaseUpdateTail = releaseUpdate(0)

// releaseUpdate is releaseUpdateTail for a release that claims (claim, the
// number of its lease's parameter, and claim+1 its worker's, is not 0): the
// dependents that releaseClaimStep picked (k) become running under its
// fence (f), as claimSQL's jobs do, rather than available.
func releaseUpdate(claim int) string {
	claimIn, claimAgg, claimUnnest, claimState, claimSet := "", "", "", "", ""
	if claim > 0 {
		claimIn = `, l.id IN (SELECT id FROM k) AS claim`
		claimAgg = `, array_agg(claim) AS claims`
		claimUnnest = `, unnest(a.claims) AS claim`
		claimState = `
                     WHEN c.claim THEN 'running'`
		claimSet = fmt.Sprintf(`
        attempt = CASE WHEN c.claim THEN j.attempt + 1 ELSE j.attempt END,
        fence = CASE WHEN c.claim THEN (SELECT fence FROM f) ELSE j.fence END,
        lease_expires_at = CASE WHEN c.claim THEN now() + $%d::bigint * interval '1 microsecond' ELSE j.lease_expires_at END,
        attempted_at = CASE WHEN c.claim THEN statement_timestamp() ELSE j.attempted_at END,
        attempted_by = CASE WHEN c.claim THEN j.attempted_by[greatest(array_length(j.attempted_by, 1) - 8, 1):] || $%d::text
            ELSE j.attempted_by END,`, claim, claim+1)
	}
	return `, a AS (
    SELECT array_agg(id) AS ids, array_agg(n) AS ns, array_agg(cancel) AS cancels,
           array_agg(nofail) AS nofails, array_agg(failed) AS faileds,
           array_agg(cause) AS causes, array_agg(cause_state) AS cause_states,
           array_agg(adopt_name) AS adopt_names, array_agg(adopt_part) AS adopt_parts, array_agg(adopt_fair) AS adopt_fairs` + claimAgg + `
    FROM (SELECT l.*` + claimIn + ` FROM l) l
), u AS (
    UPDATE jobfence_jobs j
    SET state = CASE WHEN c.cancel THEN 'cancelled'
                     WHEN j.deps_left - c.n > 0 THEN 'pending'
                     WHEN j.scheduled_at > now() THEN 'scheduled'
                     WHEN coalesce(j.limit_name, c.adopt_name) IS NOT NULL THEN 'limited'` + claimState + `
                     ELSE 'available' END,` + claimSet + `
        limit_name = CASE WHEN NOT c.cancel AND j.deps_left - c.n <= 0 AND j.scheduled_at <= now()
                          THEN coalesce(j.limit_name, c.adopt_name) ELSE j.limit_name END,
        limit_part = CASE WHEN NOT c.cancel AND j.deps_left - c.n <= 0 AND j.scheduled_at <= now() AND j.limit_name IS NULL
                          THEN c.adopt_part ELSE j.limit_part END,
        limit_fair = CASE WHEN NOT c.cancel AND j.deps_left - c.n <= 0 AND j.scheduled_at <= now() AND j.limit_name IS NULL
                          THEN c.adopt_fair ELSE j.limit_fair END,
        deps_left = CASE WHEN c.cancel AND NOT c.nofail THEN j.deps_left ELSE greatest(j.deps_left - c.n, 0) END,
        dep_failed = CASE WHEN c.failed AND j.run_on_failure THEN true ELSE j.dep_failed END,
        scheduled_at = CASE WHEN NOT c.cancel AND j.deps_left - c.n <= 0 THEN greatest(j.scheduled_at, now()) ELSE j.scheduled_at END,
        finalized_at = CASE WHEN c.cancel THEN now() END,
        errors = CASE WHEN NOT c.cancel THEN j.errors
            WHEN c.nofail THEN j.errors || jsonb_build_array(jsonb_build_object('attempt', j.attempt, 'at', now(), 'error', '` + noFailureReason + `'))
            ELSE j.errors || jsonb_build_array(jsonb_build_object(
            'attempt', j.attempt, 'at', now(),
            'error', 'jobfence: dependency failed: task "' || c.cause || '" was ' || c.cause_state || '; cancelled')) END
    FROM (SELECT unnest(a.ids) AS id, unnest(a.ns) AS n, unnest(a.cancels) AS cancel,
                 unnest(a.nofails) AS nofail, unnest(a.faileds) AS failed,
                 unnest(a.causes) AS cause, unnest(a.cause_states) AS cause_state,
                 unnest(a.adopt_names) AS adopt_name, unnest(a.adopt_parts) AS adopt_part, unnest(a.adopt_fairs) AS adopt_fair` + claimUnnest + ` FROM a) c
    WHERE j.id = c.id AND j.state = 'pending'
    RETURNING j.id, j.state, j.queue, j.ctid, c.nofail, j.dependents IS NOT NULL AS listed
), cq AS (
    INSERT INTO jobfence_cascades (task_id) SELECT id FROM u WHERE u.nofail AND u.listed
    ON CONFLICT DO NOTHING
    RETURNING task_id
)`
}

// noFailureReason is the error recorded on a RunOnFailure task cancelled
// because every dependency completed.
const noFailureReason = `jobfence: no dependency failed: every dependency completed, and the task runs only if one fails (RunOnFailure); cancelled`

// releaseClosure is the head of releaseSQL: what a release changes, and
// its rows locked (l: each row's ID, and either the dependencies it loses
// (n) or, if cancel, the task whose failure cancels it and how it ended
// (cause, cause_state)).
const releaseClosure = `
WITH RECURSIVE done AS MATERIALIZED (
    SELECT id, state, task_name, dependents, off FROM (
        SELECT j.id, j.state, j.task_name, j.dependents, coalesce(j.dependents_released, 0) AS off, j.xmin AS x
        FROM unnest((SELECT $1::bigint[])) AS f(id)
        JOIN jobfence_jobs j ON j.id = f.id
        OFFSET 0
    ) j
    WHERE j.x = pg_current_xact_id()::xid AND j.dependents IS NOT NULL
      AND j.state IN ('completed', 'discarded', 'cancelled')
), cx(id, cause, cause_state) AS (
    SELECT t.id, d.task_name, d.state
    FROM done d CROSS JOIN LATERAL unnest(d.dependents[d.off + 1:]) AS u(id)
    CROSS JOIN LATERAL (
        SELECT t.id FROM jobfence_jobs t
        WHERE t.id = u.id AND t.state = 'pending' AND t.run_anyway IS NOT TRUE AND t.run_on_failure IS NOT TRUE OFFSET 0) t
    WHERE d.state <> 'completed'
  UNION
    SELECT t.id, p.task_name, 'cancelled'
    FROM cx CROSS JOIN LATERAL (SELECT p.task_name, p.dependents FROM jobfence_jobs p WHERE p.id = cx.id OFFSET 0) p
    CROSS JOIN LATERAL unnest(p.dependents) AS u(id)
    CROSS JOIN LATERAL (
        SELECT t.id FROM jobfence_jobs t
        WHERE t.id = u.id AND t.state = 'pending' AND t.run_anyway IS NOT TRUE AND t.run_on_failure IS NOT TRUE OFFSET 0) t
), cset AS MATERIALIZED (
    SELECT DISTINCT ON (id) id, cause, cause_state FROM cx ORDER BY id, cause
), edges AS (
    SELECT u.id, d.state <> 'completed' AS failed FROM done d
    CROSS JOIN LATERAL unnest(CASE WHEN d.state = 'completed' THEN d.dependents[d.off + 1:d.off + $2] ELSE d.dependents[d.off + 1:] END) AS u(id)
  UNION ALL
    SELECT u.id, true FROM cset c
    CROSS JOIN LATERAL (SELECT p.dependents FROM jobfence_jobs p WHERE p.id = c.id OFFSET 0) p
    CROSS JOIN LATERAL unnest(p.dependents) AS u(id)
), s AS (
    SELECT id, count(*)::int AS n, bool_or(failed) AS failed, false AS cancel, NULL::text AS cause, NULL::text AS cause_state
    FROM edges WHERE id NOT IN (SELECT id FROM cset) GROUP BY id
  UNION ALL
    SELECT id, NULL, true, true, cause, cause_state FROM cset
)` + releaseLockTail

// releaseLockTail locks the dependents a release changes, given s: each
// one's ID, and either the dependencies it loses (n) and whether one of
// them failed (failed), or, if cancel, the task whose failure cancels it
// and how it ended (cause, cause_state). It is l: the same rows with the
// limit a released one comes under (adopt), and what decides whether a
// release may claim them (releaseClaimStep).
//
// A task that runs only on a failure (run_on_failure) is never cancelled
// by a failed dependency: it counts it as ended, as run_anyway does, and
// remembers it (dep_failed). When its last dependency ends and none of
// them failed (nofail), it is cancelled instead of released, with
// noFailureReason; its own dependents are cancelled through
// jobfence_cascades (see cascadeSQL), since one statement cannot follow
// a cancellation it makes down the workflow. The test costs the common
// release nothing more than the columns of the row it locks anyway.
const releaseLockTail = `, l AS MATERIALIZED (
    SELECT s.id, s.n, s.cancel OR nf.v AS cancel, nf.v AS nofail, s.failed, s.cause, s.cause_state,
        adopt.name AS adopt_name, adopt.part AS adopt_part, adopt.fair AS adopt_fair,
        j.queue, j.priority, j.deps_left, j.scheduled_at, j.limit_name AS own_limit
    FROM (SELECT * FROM s ORDER BY id OFFSET 0) s
    CROSS JOIN LATERAL (
        SELECT j.id, j.queue, j.kind, j.args, j.limit_name, j.priority, j.deps_left, j.scheduled_at, j.run_on_failure, j.dep_failed
        FROM jobfence_jobs j
        WHERE j.id = s.id AND j.state = 'pending' FOR UPDATE OF j) j
    CROSS JOIN LATERAL (SELECT coalesce(NOT s.cancel AND j.run_on_failure IS TRUE AND j.deps_left - s.n <= 0
        AND j.dep_failed IS NOT TRUE AND s.failed IS NOT TRUE, false) AS v) nf
    ` + adoptLateralSQL + `(SELECT EXISTS (SELECT FROM jobfence_limits)) AND NOT s.cancel` + adoptLateralEndSQL + `
)`

// releaseLockSQL locks, as releaseSQL does, the rows a release of $1
// would change, and counts them.
const releaseLockSQL = releaseClosure + `
SELECT count(*) FROM l`

// maxReleasePasses bounds the passes of releaseLockSQL in release.
const maxReleasePasses = 100

// ErrWorkflowGrowing is wrapped by the error of a release whose
// cancellations kept meeting tasks appended (workflow.Append) meanwhile,
// maxReleasePasses times in a row: the transaction that ended the tasks
// is rolled back, and the outcome is applied again later (the worker
// retries a finish, the rescue and the promoter run again).
var ErrWorkflowGrowing = errors.New("jobfence: tasks kept being appended to a workflow while its tasks were being cancelled")

// release runs releaseSQL in tx for the workflow tasks among ids that tx
// has just ended, releasing at most chunk dependents of each completed
// one there; it returns the completed tasks that have more, whose ranges
// it recorded for after the commit (see releaseRangeSQL). When cascade is
// set (some may have been discarded or cancelled), releaseLockSQL first
// locks what the release would change, again and again until a pass finds
// nothing new.
//
// The reason is a task appended meanwhile to a task that the release
// cancels by an instance of the release before migration 00024 (this
// release's appends write edges, which the promoter's sweep follows: see
// addEdgesSQL). Such an append locks the tasks its new ones depend on
// and writes their dependents, and a statement's snapshot is taken when
// it starts, so a release that waited for those locks computed its
// cascade from dependents lists that lacked the new tasks, which stayed
// pending for good. Every row a pass locks is held from then on, so an
// append that held one had committed before the next pass began, which
// sees its tasks; once a pass locks no row more than the one before, the
// cascade is complete, and an append that comes later waits for this
// transaction and then finds its dependencies cancelled, and inserts its
// tasks cancelled. A completion alone needs no pass: the dependents it
// releases are listed on the rows that its own statement locked.
func release(ctx context.Context, tx pgx.Tx, ids []int64, cascade bool, chunk int, channel string) (released, error) {
	if cascade {
		last := int64(-1)
		for pass := 0; ; pass++ {
			if pass == maxReleasePasses {
				return released{}, fmt.Errorf("release dependents: %w (%d passes)", ErrWorkflowGrowing, pass)
			}
			var n int64
			if err := tx.QueryRow(ctx, releaseLockSQL, ids, chunk).Scan(&n); err != nil {
				return released{}, fmt.Errorf("release dependents: lock: %w", err)
			}
			if n == last {
				break
			}
			last = n
		}
	}
	rows, err := tx.Query(ctx, releaseSQL, ids, chunk, channel)
	if err != nil {
		return released{}, fmt.Errorf("release dependents: %w", err)
	}
	r, err := scanReleased(rows)
	if err != nil {
		return released{}, fmt.Errorf("release dependents: %w", err)
	}
	if len(r.cascades) > 0 {
		more, err := cascadeInTx(ctx, tx, r.cascades, chunk, channel)
		if err != nil {
			return released{}, err
		}
		r.cascades = nil
		for q, n := range more.ready {
			if r.ready == nil {
				r.ready = map[string]int{}
			}
			r.ready[q] += n
		}
	}
	return r, nil
}

// cascadeInTx cancels, in tx, the dependents of the RunOnFailure tasks ids
// that tx's release has just cancelled (no dependency failed) as any
// cancel's release does, and deletes the tasks' rows of
// jobfence_cascades, which that release wrote: tx wrote the tasks, so
// their release passes the xmin test.
func cascadeInTx(ctx context.Context, tx pgx.Tx, ids []int64, chunk int, channel string) (released, error) {
	if _, err := tx.Exec(ctx, `DELETE FROM jobfence_cascades WHERE task_id = ANY($1)`, ids); err != nil {
		return released{}, fmt.Errorf("release dependents: cascade: %w", err)
	}
	return release(ctx, tx, ids, true, chunk, channel)
}

// releaseFailed is release for tasks that tx discarded or cancelled,
// with every dependent they cancel (they complete none, so they leave no
// range for after the commit: a range the release recorded anyway would
// be released by a worker's maintenance). A dependent that runs anyway
// becomes available, and tx notifies its queue itself: tx may be a
// caller's (DeleteTx), and these releases (a cancel, a discard, a
// deletion, a rescue's) are rare beside completions'.
func (c *Client) releaseFailed(ctx context.Context, tx pgx.Tx, ids []int64) error {
	_, err := release(ctx, tx, ids, true, c.cfg.ReleaseChunk, insertChannel)
	return err
}

// released is what a release (releaseSQL, releaseRangeSQL) replied.
type released struct {
	// more are the completed tasks whose dependents past the first chunk
	// wait in jobfence_releases (releaseSQL), or the range's task
	// (releaseRangeSQL).
	more []int64
	// ready holds the queues that dependents became available in, for
	// wakeReady.
	ready map[string]int
	// claim is what a release that claims (releaseClaimSQL,
	// releaseRangeClaimSQL) replied of its claim: its fence, and the
	// claimed jobs' IDs and row versions.
	claim claimReply
	// cascades are the RunOnFailure tasks the release cancelled (no
	// dependency failed) whose dependents wait in jobfence_cascades to be
	// cancelled in turn (cascadeInTx, or cascadeAfterCommit).
	cascades []int64
}

// scanReleased reads a release's reply: rows of a queue that dependents
// became available in, and rows of a task ID (see released).
func scanReleased(rows pgx.Rows) (released, error) {
	var r released
	for rows.Next() {
		var q, kind *string
		var id *int64
		dest := []any{&q, &id, &kind}
		var fence *int64
		var ids []int64
		var ctids []pgtype.TID
		if len(rows.FieldDescriptions()) > len(dest) {
			dest = append(dest, &fence, &ids, &ctids)
		}
		if err := rows.Scan(dest...); err != nil {
			rows.Close()
			return released{}, err
		}
		switch {
		case fence != nil:
			r.claim = claimReply{fence: fence, ids: ids, ctids: ctids}
		case q != nil:
			if r.ready == nil {
				r.ready = map[string]int{}
			}
			r.ready[*q]++
		case id != nil && kind != nil && *kind == "cascade":
			r.cascades = append(r.cascades, *id)
		case id != nil:
			r.more = append(r.more, *id)
		}
	}
	rows.Close()
	return r, rows.Err()
}
