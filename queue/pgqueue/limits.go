package pgqueue

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Limit is flow control for the jobs of a queue, or of one kind in it,
// across every instance of a fleet: at most Concurrency of them hold a
// slot at once, at most Rate start per Period, per partition. It is
// stored in the database (SetLimit), so every instance obeys it, and a
// change, from code, `jobfence limits set` or the dashboard, applies at
// the next grant: at once for jobs that wait, within a worker's
// PromoteInterval for slots a change frees.
//
// A job governed by a limit is inserted limited (queue.StateLimited) and
// becomes available only with a slot, handed out oldest job first; claims
// read only available jobs, so a limit costs a claim nothing. A slot is
// held by a job while it is available or running; a job that is retried
// gives it back (River and Oban count running jobs too) unless
// OnFailure says to hold it. A holder whose worker froze or died keeps
// its slot until its lease expires and a rescuer moves the job on; its
// late outcome is refused by the fence, so it can neither finish the job
// nor free a slot that is no longer its own. The limit therefore counts
// every running job, live lease or expired one not yet rescued: never
// more than Concurrency run at once.
type Limit struct {
	// Name names the limit; required.
	Name string
	// Queue is the queue whose jobs it governs; required.
	Queue string
	// Kind, when set, narrows the limit to the jobs of that kind; a kind's
	// limit takes precedence over its queue's. A job is governed by one
	// limit at most.
	Kind string
	// PartitionBy names top-level fields of the jobs' JSON args whose
	// values make a job's partition: each partition has the limit to
	// itself (at most Concurrency per customer_id). Empty: one partition.
	// A job inserted with queue.EnqueueParams.LimitKey takes that key as
	// its partition instead.
	PartitionBy []string
	// Concurrency caps the jobs of a partition that hold a slot at once;
	// zero means no cap (Rate alone).
	Concurrency int
	// Rate caps the jobs of a partition that start within any Period;
	// zero means no cap. A rate slot is free again a Period after the
	// start of the job it was last granted to.
	Rate int
	// Period is Rate's window; required with Rate.
	Period time.Duration
	// Sequence runs the jobs of a partition one at a time in insert
	// order (Concurrency 1, a failed job holding its sequence: OnFailure
	// defaults to FailureHold).
	Sequence bool
	// OnFailure says what a failed job does with its slot; the default is
	// FailureRelease, or FailureHold for a Sequence.
	OnFailure FailurePolicy
	// FairBy, when set, names a top-level field of the jobs' args (a
	// tenant, say) whose value, as text ("" where the field is absent or
	// null), is the job's fair key: a partition's free slots are then
	// handed round-robin across the fair keys that have waiting jobs,
	// FairWeights jobs of a key a turn, rather than to the oldest job of
	// the partition, so that one key's backlog does not hold back another
	// key's jobs (docs/limits.md#fair-share). Empty: oldest job first. A
	// Sequence cannot have it.
	FairBy string
	// FairWeights gives fair keys a weight: the jobs a key is granted in
	// its turn, from 1 to MaxFairWeight; a key not named has weight 1.
	// It needs FairBy.
	FairWeights map[string]int
}

// MaxFairWeight bounds a fair key's weight (Limit.FairWeights).
const MaxFairWeight = 100

// maxFairWeights bounds the keys that Limit.FairWeights names.
const maxFairWeights = 10000

// FailurePolicy says whether a failed job keeps its concurrency slot.
type FailurePolicy string

// The failure policies of a limit.
const (
	// FailureRelease: a job waiting to be retried holds no slot; it waits
	// for one again when its backoff ends. A discarded job holds none.
	FailureRelease FailurePolicy = "release"
	// FailureHold: a job waiting to be retried keeps its slot through its
	// backoff, so no later job of its partition overtakes it; discarded or
	// cancelled, it lets the next one go.
	FailureHold FailurePolicy = "hold"
	// FailureHalt: as FailureHold, and a discarded job keeps its slot too,
	// halting its partition until it is retried (and gets a slot again,
	// first) or cancelled, or pruned.
	FailureHalt FailurePolicy = "halt"
)

// InvalidLimitError reports a Limit that SetLimit refuses.
type InvalidLimitError struct {
	Field, Reason string
}

func (e *InvalidLimitError) Error() string {
	return fmt.Sprintf("pgqueue: invalid limit: %s %s", e.Field, e.Reason)
}

// ErrLimitNotFound reports a limit name that no stored limit has.
var ErrLimitNotFound = errors.New("pgqueue: no such limit")

var fieldRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_\-]*$`)

// normalize checks l and fills in what Sequence and OnFailure imply.
func (l Limit) normalize() (Limit, error) {
	bad := func(field, reason string) (Limit, error) {
		return Limit{}, &InvalidLimitError{Field: field, Reason: reason}
	}
	switch {
	case l.Name == "":
		return bad("Name", "is empty")
	case l.Queue == "":
		return bad("Queue", "is empty")
	case l.Concurrency < 0:
		return bad("Concurrency", "is negative")
	case l.Rate < 0:
		return bad("Rate", "is negative")
	case l.Rate > 0 && l.Period <= 0:
		return bad("Period", "must be positive with a Rate")
	case l.Rate == 0 && l.Period != 0:
		return bad("Period", "is set without a Rate")
	case l.Sequence && l.Concurrency > 1:
		return bad("Concurrency", "must be 0 or 1 in a Sequence")
	}
	for _, f := range l.PartitionBy {
		if !fieldRE.MatchString(f) {
			return bad("PartitionBy", fmt.Sprintf("field %q is not a top-level JSON field name", f))
		}
	}
	if err := l.checkFair(); err != nil {
		return Limit{}, err
	}
	if l.Sequence {
		l.Concurrency = 1
	}
	if l.Concurrency == 0 && l.Rate == 0 {
		return bad("Concurrency", "and Rate are both zero: the limit would limit nothing")
	}
	switch l.OnFailure {
	case "":
		l.OnFailure = FailureRelease
		if l.Sequence {
			l.OnFailure = FailureHold
		}
	case FailureRelease, FailureHold, FailureHalt:
	default:
		return bad("OnFailure", fmt.Sprintf("%q is not release, hold or halt", l.OnFailure))
	}
	if l.PartitionBy == nil {
		l.PartitionBy = []string{}
	}
	if l.FairWeights == nil {
		l.FairWeights = map[string]int{}
	}
	return l, nil
}

// checkFair checks l's FairBy and FairWeights.
func (l Limit) checkFair() error {
	bad := func(field, reason string) error { return &InvalidLimitError{Field: field, Reason: reason} }
	if l.FairBy == "" {
		if len(l.FairWeights) > 0 {
			return bad("FairWeights", "is set without FairBy")
		}
		return nil
	}
	if !fieldRE.MatchString(l.FairBy) {
		return bad("FairBy", fmt.Sprintf("field %q is not a top-level JSON field name", l.FairBy))
	}
	if l.Sequence {
		return bad("FairBy", "cannot be combined with Sequence: a sequence runs its partition in insert order")
	}
	if len(l.FairWeights) > maxFairWeights {
		return bad("FairWeights", fmt.Sprintf("names %d keys, more than %d", len(l.FairWeights), maxFairWeights))
	}
	for _, k := range slices.Sorted(maps.Keys(l.FairWeights)) {
		if w := l.FairWeights[k]; w < 1 || w > MaxFairWeight {
			return bad("FairWeights", fmt.Sprintf("weight %d of key %q is not between 1 and %d", w, k, MaxFairWeight))
		}
	}
	return nil
}

// setLimitSQL stores a limit and returns the FairBy it had before ("" for
// a new limit): the snapshot's, which the CTE reads before the upsert.
const setLimitSQL = `
WITH old AS (SELECT fair_by FROM jobfence_limits WHERE name = $1), up AS (
INSERT INTO jobfence_limits (name, queue, kind, partition_by, concurrency, rate, period_us, hold_retrying, hold_discarded,
    fair_by, fair_weights, updated_at)
VALUES ($1, $2, $3, $4, NULLIF($5, 0), NULLIF($6, 0), NULLIF($7::bigint, 0), $8, $9, $10, $11, now())
ON CONFLICT (name) DO UPDATE SET queue = EXCLUDED.queue, kind = EXCLUDED.kind, partition_by = EXCLUDED.partition_by,
    concurrency = EXCLUDED.concurrency, rate = EXCLUDED.rate, period_us = EXCLUDED.period_us,
    hold_retrying = EXCLUDED.hold_retrying, hold_discarded = EXCLUDED.hold_discarded,
    fair_by = EXCLUDED.fair_by, fair_weights = EXCLUDED.fair_weights, updated_at = now()
RETURNING 1)
SELECT coalesce((SELECT fair_by FROM old), '') FROM up`

// SetLimit stores l, replacing the limit of the same name. It applies to
// the jobs inserted from then on, and to those of its queue (and kind)
// that no limit governed yet and have not started, those of inserts in
// flight included (it waits for them, Config.LimitSettle at most; see
// settleLimit): available ones wait
// for a slot from then on (adoptAvailable), scheduled or retrying ones
// when their time comes (promoteSQL), and a workflow's pending tasks when
// their dependencies release them (releaseSQL). Jobs already running are not
// counted: they finish, and the limit counts the jobs it grants. A
// lowered limit takes back the slots of the jobs granted them that have
// not started, in a partition over it (revokeSQL): they wait again. A
// changed
// Concurrency, Rate or OnFailure applies at once to the jobs it governs
// already (every grant reads it). Changing a limit's Queue, Kind or
// PartitionBy leaves the jobs it governed under the partition they were
// given. Another limit of the same queue and kind is refused (a job has
// one limit).
func (c *Client) SetLimit(ctx context.Context, l Limit) error {
	l, err := l.normalize()
	if err != nil {
		return err
	}
	var oldFairBy string
	err = c.pool.QueryRow(ctx, setLimitSQL, l.Name, l.Queue, l.Kind, l.PartitionBy, l.Concurrency, l.Rate,
		l.Period.Microseconds(), l.OnFailure != FailureRelease, l.OnFailure == FailureHalt, l.FairBy, l.FairWeights).Scan(&oldFairBy)
	if err != nil {
		return fmt.Errorf("pgqueue: set limit %q: %w", l.Name, err)
	}
	c.settleLimit(ctx, l.Name)
	if l.FairBy != "" && l.FairBy != oldFairBy {
		if err := c.rekeyWaiting(ctx, l.Name); err != nil {
			return fmt.Errorf("pgqueue: set limit %q: stored, but keying its waiting jobs by FairBy failed (set it again to retry): %w", l.Name, err)
		}
	}
	adopted, err := c.adoptAvailable(ctx, l.Name)
	if err != nil {
		return fmt.Errorf("pgqueue: set limit %q: stored, but bringing the jobs already available under it failed (set it again to retry): %w", l.Name, err)
	}
	revoked, err := c.revokeAbove(ctx, l.Name)
	if err != nil {
		return fmt.Errorf("pgqueue: set limit %q: stored, but taking back the slots above it from jobs not started failed (set it again to retry): %w", l.Name, err)
	}
	adopted = append(adopted, revoked...)
	for len(adopted) > 0 {
		n := min(len(adopted), grantBatch)
		if _, err := c.grant(ctx, adopted[:n]); err != nil {
			c.cfg.Logger.Warn("pgqueue: limit set, but granting its jobs failed; the workers' next pass grants them", "limit", l.Name, "err", err)
			break
		}
		adopted = adopted[n:]
	}
	// Slots it frees (a raised limit) go to waiting jobs now rather than
	// at the next maintenance pass.
	if _, err := c.GrantWaiting(ctx, grantBatch); err != nil {
		c.cfg.Logger.Warn("pgqueue: limit set, but granting its free slots failed; the workers' next pass grants them",
			"limit", l.Name, "err", err)
	}
	return nil
}

// DefaultLimitSettle is the default of Config.LimitSettle.
const DefaultLimitSettle = 5 * time.Second

// limitSettlePoll is how often settleLimit looks for the transactions it
// waits for.
const limitSettlePoll = 20 * time.Millisecond

// olderTransactionsSQL counts the other transactions that began before
// $1 and hold the lock an insert takes on this schema's jobs table: a
// statement takes its table's locks before its snapshot, and a transaction
// keeps them until it ends, so every transaction that inserted, or is
// inserting, with a snapshot older than $1 is among them. Those of other
// roles show no xact_start to a role without pg_read_all_stats and are not
// counted.
const olderTransactionsSQL = `SELECT count(DISTINCT l.pid) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'relation' AND l.relation = 'jobfence_jobs'::regclass AND l.mode = 'RowExclusiveLock' AND l.granted
  AND l.pid <> pg_backend_pid() AND a.xact_start < $1`

// settleLimit waits, Config.LimitSettle at most, until every transaction
// that began before the limit was stored and writes to the jobs table
// (olderTransactionsSQL) has ended. An insert reads the
// limits with its statement's snapshot, so one whose snapshot predates the
// limit's commit inserts its job available and ungoverned, and may commit
// after adoptSQL has run. A transaction that began after the limit
// committed sees it in every statement. Waiting for the others first lets
// adoptSQL find their jobs. The wait is on other sessions, so it is
// bounded: one frozen or left open (a caller's EnqueueTx that never ends)
// costs SetLimit LimitSettle, and its jobs are not governed, which is
// logged (TestSetLimitWaitsForInsertsInFlight freezes one).
func (c *Client) settleLimit(ctx context.Context, name string) {
	var since time.Time
	if err := c.pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&since); err != nil {
		c.cfg.Logger.Warn("pgqueue: limit set, but reading the server's clock failed; not waiting for inserts in flight", "limit", name, "err", err)
		return
	}
	deadline := time.Now().Add(c.cfg.LimitSettle)
	for {
		var open int
		if err := c.pool.QueryRow(ctx, olderTransactionsSQL, since).Scan(&open); err != nil {
			c.cfg.Logger.Warn("pgqueue: limit set, but reading the open transactions failed; not waiting for inserts in flight", "limit", name, "err", err)
			return
		}
		if open == 0 {
			return
		}
		if !time.Now().Before(deadline) {
			c.cfg.Logger.Warn("pgqueue: limit set while transactions were open, and some still are; the jobs they insert are not governed by it",
				"limit", name, "open", open, "waited", c.cfg.LimitSettle)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(limitSettlePoll):
		}
	}
}

// adoptSQL brings up to $2 available jobs of limit $1's queue (and kind)
// that no limit governs under it, as limited jobs of the partition their
// args give (limitOfSQL's rule; a LimitKey given to an insert into a
// queue with no limit was not kept), in one statement: the jobs that a
// kind's own limit would govern are left to it. Rows another statement
// holds (a claim taking them) are skipped: those jobs start as they would
// have. It reads the queue's available jobs through the claim's index;
// each batch is a transaction of its own with a 1 s lock_timeout, so the
// rewrite runs beside a live fleet.
//
// transition: adopt
const adoptSQL = `
WITH m AS MATERIALIZED (
    SELECT name, queue, kind, partition_by, fair_by FROM jobfence_limits WHERE name = $1
), c AS MATERIALIZED (
    SELECT j.id FROM jobfence_jobs j JOIN m ON j.queue = m.queue
    WHERE j.state = 'available' AND j.limit_name IS NULL AND (m.kind = '' OR j.kind = m.kind)
      AND NOT EXISTS (SELECT FROM jobfence_limits k WHERE k.queue = j.queue AND k.kind = j.kind AND k.kind <> m.kind)
    ORDER BY j.priority, j.scheduled_at, j.id
    LIMIT $2
    FOR UPDATE OF j SKIP LOCKED
)
UPDATE jobfence_jobs j
SET state = 'limited', limit_name = m.name, limit_slot = NULL,
    limit_part = ` + jobPartSQL + `, limit_fair = ` + jobFairSQL + `
FROM c, m
WHERE j.id = c.id AND j.state = 'available' AND j.limit_name IS NULL
RETURNING j.limit_part`

// jobPartSQL is job j's partition of limit m: the JSON array of its args'
// PartitionBy fields, or the empty string when m has none (limitOfSQL's
// rule).
const jobPartSQL = `CASE WHEN cardinality(m.partition_by) = 0 THEN ''
        ELSE (SELECT jsonb_agg(coalesce(j.args -> f, 'null'::jsonb) ORDER BY o)::text
              FROM unnest(m.partition_by) WITH ORDINALITY AS pb(f, o)) END`

// jobFairSQL is job j's fair key under limit m: the text of its args'
// FairBy field ("" where it is absent or null), or NULL when m has no
// FairBy (Limit.FairBy).
const jobFairSQL = `CASE WHEN m.fair_by = '' THEN NULL ELSE coalesce(j.args ->> m.fair_by, '') END`

// adoptLateralSQL and adoptLateralEndSQL, around a condition, are a
// LATERAL subquery (adopt: a limit's name, part and fair key) that finds the limit
// that governs job j now, when no limit governed it as it was inserted
// and the condition holds: its kind's, else its queue's, as limitOfSQL
// finds one for an insert, with a probe of the limits' (queue, kind)
// index. promoteSQL and releaseSQL bring jobs under a limit set after
// them with it.
const (
	adoptLateralSQL = `LEFT JOIN LATERAL (
        SELECT m.name, ` + jobPartSQL + ` AS part, ` + jobFairSQL + ` AS fair
        FROM jobfence_limits m
        WHERE `
	adoptLateralEndSQL = ` AND j.limit_name IS NULL AND m.queue = j.queue AND m.kind IN (j.kind, '')
        ORDER BY m.kind DESC
        LIMIT 1
    ) adopt ON true`
)

// insertLimitSQL finds, for each row a statement inserts (in its FROM: q
// the queue, k the kind, a the args, lk a partition key given at insert,
// the empty string for none), the limit that governs it and its
// partition (lim.name, lim.part, lim.fair; NULL when none does), as limitOfSQL does
// for one job. EnqueueMany's and a workflow's inserts share it.
const insertLimitSQL = `LEFT JOIN LATERAL (
    SELECT m.name, CASE WHEN lk <> '' THEN lk ELSE ` + jobPartSQL + ` END AS part, ` + jobFairSQL + ` AS fair
    FROM jobfence_limits m, (SELECT a AS args) j
    WHERE m.queue = q AND m.kind IN (k, '')
    ORDER BY m.kind DESC
    LIMIT 1
) lim ON true`

// adoptBatch bounds the jobs one adoptSQL statement rewrites.
const adoptBatch = 1000

// adoptAvailable runs adoptSQL for limit name until a batch finds fewer
// than adoptBatch jobs, and returns the partitions it put jobs in.
func (c *Client) adoptAvailable(ctx context.Context, name string) ([]partition, error) {
	return c.limitAvailable(ctx, name, adoptSQL)
}

// revokeSQL makes up to $2 available jobs of limit $1 wait again,
// limited, their slots given up, where the limit was lowered under what
// was granted: every such job of a partition whose slot holders
// (holdsSQL) outnumber its current Concurrency, and any that holds a
// rate slot at or above its current Rate granted within the period. These
// are jobs a grant made available before the limit was lowered, which
// have not started; the grant hands them slots again under the current
// limit, counting the holders above it. Without it they started after
// SetLimit returned, above the new limit, whichever slot they held (a
// job on slot 0 beside a running one on slot 1 of a limit lowered from 2
// to 1 as much as one on slot 1). Rows another statement holds (a claim
// taking them) are skipped: those jobs start as they would have, as the
// running jobs above a lowered limit finish. It reads the queue's
// available jobs through the claim's index.
//
// transition: lower
var revokeSQL = `
WITH m AS MATERIALIZED (
    SELECT name, queue, concurrency, rate, period_us FROM jobfence_limits WHERE name = $1
), over AS MATERIALIZED (
    SELECT s.part FROM jobfence_limit_slots s
    JOIN jobfence_limits l ON l.name = s.name
    JOIN jobfence_jobs j ON j.id = s.job_id AND ` + holdsSQL + `
    WHERE s.name = $1 AND s.kind = 0
    GROUP BY s.part
    HAVING count(*) > min(l.concurrency)
), c AS MATERIALIZED (
    SELECT j.id FROM jobfence_jobs j JOIN m ON j.queue = m.queue
    WHERE j.state = 'available' AND j.limit_name = m.name
      AND (j.limit_slot IS NOT NULL AND j.limit_part IN (SELECT part FROM over) OR EXISTS (
          SELECT FROM jobfence_limit_slots s
          WHERE s.name = m.name AND s.part = j.limit_part AND s.kind = 1 AND s.job_id = j.id AND s.slot >= m.rate
            AND s.granted_at >= now() - m.period_us * interval '1 microsecond'))
    LIMIT $2
    FOR UPDATE OF j SKIP LOCKED
)
UPDATE jobfence_jobs j
SET state = 'limited', limit_slot = NULL
FROM c
WHERE j.id = c.id AND j.state = 'available'
RETURNING j.limit_part`

// revokeAbove makes the available jobs of limit name that hold a slot at
// or above its current value wait again (revokeSQL), and returns their
// partitions.
func (c *Client) revokeAbove(ctx context.Context, name string) ([]partition, error) {
	return c.limitAvailable(ctx, name, revokeSQL)
}

// limitAvailable runs sql, adoptSQL or revokeSQL, for limit name in
// batches of adoptBatch, each a transaction of its own with the grants'
// lock_timeout, until a batch is not full, and returns the partitions of
// the jobs it made limited.
func (c *Client) limitAvailable(ctx context.Context, name, sql string) ([]partition, error) {
	seen := map[string]bool{}
	var ps []partition
	for {
		var b pgx.Batch
		b.Queue(grantSettingsSQL, grantWait.Milliseconds())
		b.Queue(sql, name, adoptBatch)
		br := c.pool.SendBatch(ctx, &b)
		n := 0
		_, err := br.Exec()
		if err == nil {
			var rows pgx.Rows
			if rows, err = br.Query(); err == nil {
				for rows.Next() {
					var part string
					if err = rows.Scan(&part); err != nil {
						break
					}
					n++
					if !seen[part] {
						seen[part] = true
						ps = append(ps, partition{name: name, part: part})
					}
				}
				rows.Close()
				if err == nil {
					err = rows.Err()
				}
			}
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return ps, err
		}
		if n < adoptBatch {
			return ps, nil
		}
	}
}

const limitsSQL = `SELECT name, queue, kind, partition_by, coalesce(concurrency, 0), coalesce(rate, 0), coalesce(period_us, 0),
    hold_retrying, hold_discarded, fair_by, fair_weights FROM jobfence_limits ORDER BY name`

// Limits returns the stored limits, by name.
func (c *Client) Limits(ctx context.Context) ([]Limit, error) {
	rows, err := c.pool.Query(ctx, limitsSQL)
	if err != nil {
		return nil, fmt.Errorf("pgqueue: limits: %w", err)
	}
	defer rows.Close()
	var out []Limit
	for rows.Next() {
		var l Limit
		var period int64
		var hold, halt bool
		if err := rows.Scan(&l.Name, &l.Queue, &l.Kind, &l.PartitionBy, &l.Concurrency, &l.Rate, &period, &hold, &halt, &l.FairBy, &l.FairWeights); err != nil {
			return nil, fmt.Errorf("pgqueue: limits: %w", err)
		}
		l.Period = time.Duration(period) * time.Microsecond
		l.OnFailure = FailureRelease
		if halt {
			l.OnFailure = FailureHalt
		} else if hold {
			l.OnFailure = FailureHold
		}
		l.Sequence = l.Concurrency == 1 && hold && l.FairBy == ""
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgqueue: limits: %w", err)
	}
	return out, nil
}

// deleteLimitSQL deletes a limit and makes its waiting jobs available,
// 10,000 at most: more are released by the next deletes' passes, as the
// workers' GrantWaiting finds jobs of a limit that no longer exists.
const deleteLimitSQL = `
WITH d AS (
    DELETE FROM jobfence_limits WHERE name = $1 RETURNING name
), s AS (
    DELETE FROM jobfence_limit_slots WHERE name IN (SELECT name FROM d)
), f AS (
    DELETE FROM jobfence_limit_fair WHERE name IN (SELECT name FROM d)
)
SELECT count(*) FROM d`

// DeleteLimit removes the limit named name: its waiting jobs become
// available (the workers' next pass releases them, see GrantWaiting), and
// jobs inserted from then on are not limited. An unknown name wraps
// ErrLimitNotFound.
func (c *Client) DeleteLimit(ctx context.Context, name string) error {
	var n int
	if err := c.pool.QueryRow(ctx, deleteLimitSQL, name).Scan(&n); err != nil {
		return fmt.Errorf("pgqueue: delete limit %q: %w", name, err)
	}
	if n == 0 {
		return fmt.Errorf("pgqueue: delete limit %q: %w", name, ErrLimitNotFound)
	}
	if _, err := c.GrantWaiting(ctx, grantBatch); err != nil {
		c.cfg.Logger.Warn("pgqueue: limit deleted, but releasing its waiting jobs failed; the workers' next pass does",
			"limit", name, "err", err)
	}
	return nil
}

// rekeySQL gives up to $4 waiting jobs of limit $1, from the first after
// partition $2 and ID $3 in that order, the fair key that the limit's
// FairBy gives them now (jobFairSQL), and returns how many it read and
// the partition and ID of the last. It reads the limit's entries of
// jobfence_jobs_limited from where the last batch stopped, so a backlog
// is read once.
//
// transition: rekey
const rekeySQL = `
WITH m AS MATERIALIZED (
    SELECT name, fair_by FROM jobfence_limits WHERE name = $1
), c AS MATERIALIZED (
    SELECT j.id, j.limit_part FROM jobfence_jobs j
    WHERE j.state = 'limited' AND j.limit_name = $1 AND (j.limit_part, j.id) > ($2::text, $3::bigint)
    ORDER BY j.limit_name, j.limit_part, j.id
    LIMIT $4
), u AS (
    UPDATE jobfence_jobs j SET limit_fair = ` + jobFairSQL + `
    FROM c, m
    WHERE j.id = ANY (ARRAY(SELECT id FROM c)) AND j.id = c.id AND j.state = 'limited' AND j.limit_name = m.name
      AND j.limit_fair IS DISTINCT FROM (` + jobFairSQL + `)
)
SELECT count(*)::int, coalesce((SELECT limit_part FROM c ORDER BY limit_part DESC, id DESC LIMIT 1), ''),
    coalesce((SELECT id FROM c ORDER BY limit_part DESC, id DESC LIMIT 1), 0)
FROM c`

// rekeyWaiting gives the waiting jobs of limit name the fair key of its
// FairBy (rekeySQL), adoptBatch a transaction with the grants'
// lock_timeout, when SetLimit sets or changes it: jobs inserted before had
// none, and a fair grant finds a partition's jobs by their keys. A job
// that another statement holds longer than the lock_timeout fails the
// batch, and SetLimit says to set the limit again.
func (c *Client) rekeyWaiting(ctx context.Context, name string) error {
	part, id := "", int64(0)
	for {
		var b pgx.Batch
		b.Queue(grantSettingsSQL, grantWait.Milliseconds())
		var n int
		b.Queue(rekeySQL, name, part, id, adoptBatch).QueryRow(func(r pgx.Row) error { return r.Scan(&n, &part, &id) })
		if err := c.pool.SendBatch(ctx, &b).Close(); err != nil {
			return err
		}
		if n < adoptBatch {
			return nil
		}
	}
}
