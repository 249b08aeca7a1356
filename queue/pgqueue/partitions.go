package pgqueue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobfence/jobfence/queue"
)

// Partitions of jobfence_jobs_finished are named after their range,
// partitionPrefix + lower bound + "_" + upper bound (UTC, partitionStamp),
// so that every instance reads a partition's range from its name, an
// attached one as a detached one, without parsing the catalog's bound
// expressions.
const (
	partitionPrefix = "jobfence_jobs_finished_"
	partitionStamp  = "20060102150405"
)

// partitionLockWait bounds each lock wait of the partitions' DDL, as the
// migrations' lock_timeout does: no statement of the fleet waits behind
// one longer. partitionStatementWait bounds a DETACH ... CONCURRENTLY,
// whose second phase waits for every transaction that could see the
// partition; either way the pass gives up and the next one goes on.
const (
	partitionLockWait      = time.Second
	partitionStatementWait = 10 * time.Second
)

// maxPartitionSteps bounds the DDL steps of one MaintainFinished call, so
// that a call does a bounded amount of work (the next call goes on).
const maxPartitionSteps = 200

// PartitionSpan is the range of each finished-jobs partition for a
// retention: a sixth of it, from a minute to a day, so that the jobs kept
// beyond the retention are a sixth of it at most, and a year's retention
// is 365 partitions, not thousands.
func PartitionSpan(retention time.Duration) time.Duration {
	// Whole seconds: a partition's name holds its bounds to the second.
	return min(max((retention/6).Truncate(time.Second), time.Minute), 24*time.Hour)
}

// PartitionsAhead is how far past now MaintainFinished keeps partitions
// ready for completions: four spans and an hour at least, so that
// maintenance stalled that long (every instance down or cut off from the
// database) still has somewhere to put completed jobs. Past it,
// completions keep their jobs in jobfence_jobs (leavesSQL).
func PartitionsAhead(retention time.Duration) time.Duration {
	return max(4*PartitionSpan(retention), time.Hour)
}

// finishedPart is a table named as a partition of jobfence_jobs_finished.
type finishedPart struct {
	name     string
	lo, hi   time.Time
	attached bool
	pending  bool // detach pending (a DETACH CONCURRENTLY that did not finish)
}

// partitionName names the partition [lo, hi).
func partitionName(lo, hi time.Time) string {
	return partitionPrefix + lo.UTC().Format(partitionStamp) + "_" + hi.UTC().Format(partitionStamp)
}

// parsePartitionName reads a range from a name partitionName made.
func parsePartitionName(name string) (lo, hi time.Time, ok bool) {
	rest, found := strings.CutPrefix(name, partitionPrefix)
	a, b, cut := strings.Cut(rest, "_")
	if !found || !cut {
		return time.Time{}, time.Time{}, false
	}
	lo, err1 := time.ParseInLocation(partitionStamp, a, time.UTC)
	hi, err2 := time.ParseInLocation(partitionStamp, b, time.UTC)
	if err1 != nil || err2 != nil || !lo.Before(hi) {
		return time.Time{}, time.Time{}, false
	}
	return lo, hi, true
}

// partitionsSQL lists the tables named as partitions of
// jobfence_jobs_finished in its schema, whether each is attached and
// whether a detach of it is pending, with the database's clock and the
// bounds completions read.
const partitionsSQL = `
SELECT now(), (SELECT lo FROM jobfence_finished_bounds), (SELECT hi FROM jobfence_finished_bounds),
    coalesce(array_agg(c.relname::text ORDER BY c.relname) FILTER (WHERE c.oid IS NOT NULL), '{}'),
    coalesce(array_agg(i.inhrelid IS NOT NULL ORDER BY c.relname) FILTER (WHERE c.oid IS NOT NULL), '{}'),
    coalesce(array_agg(coalesce(i.inhdetachpending, false) ORDER BY c.relname) FILTER (WHERE c.oid IS NOT NULL), '{}')
FROM (SELECT 'jobfence_jobs_finished'::regclass AS parent) p
LEFT JOIN pg_class c ON c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = p.parent)
    AND c.relkind = 'r' AND starts_with(c.relname::text, '` + partitionPrefix + `')
LEFT JOIN pg_inherits i ON i.inhrelid = c.oid AND i.inhparent = p.parent`

// partitionState is what partitionsSQL read.
type partitionState struct {
	now            time.Time
	boundLo, bound *time.Time
	parts          []finishedPart
}

func (c *Client) readPartitions(ctx context.Context) (partitionState, error) {
	var st partitionState
	var names []string
	var attached, pending []bool
	if err := c.pool.QueryRow(ctx, partitionsSQL).Scan(&st.now, &st.boundLo, &st.bound, &names, &attached, &pending); err != nil {
		return st, err
	}
	for i, n := range names {
		lo, hi, ok := parsePartitionName(n)
		if !ok {
			continue
		}
		st.parts = append(st.parts, finishedPart{name: n, lo: lo, hi: hi, attached: attached[i], pending: pending[i]})
	}
	slices.SortFunc(st.parts, func(a, b finishedPart) int { return a.lo.Compare(b.lo) })
	return st, nil
}

// run returns the range that the attached partitions cover without a gap
// around t, and whether one covers t at all.
func (st partitionState) run(t time.Time) (lo, hi time.Time, ok bool) {
	var live []finishedPart
	for _, p := range st.parts {
		if p.attached && !p.pending {
			live = append(live, p)
		}
	}
	i := slices.IndexFunc(live, func(p finishedPart) bool { return !t.Before(p.lo) && t.Before(p.hi) })
	if i < 0 {
		return time.Time{}, time.Time{}, false
	}
	lo, hi = live[i].lo, live[i].hi
	for j := i - 1; j >= 0 && live[j].hi.Equal(lo); j-- {
		lo = live[j].lo
	}
	for j := i + 1; j < len(live) && live[j].lo.Equal(hi); j++ {
		hi = live[j].hi
	}
	return lo, hi, true
}

// boundsSQL sets the range completions move jobs into, [$1, $2), keeping
// a lower bound already higher: the bound only rises, so that a range
// about to be detached (raised past it first) is never offered again.
const boundsSQL = `
INSERT INTO jobfence_finished_bounds (lo, hi) VALUES ($1, $2)
ON CONFLICT (one) DO UPDATE SET lo = greatest(jobfence_finished_bounds.lo, EXCLUDED.lo), hi = EXCLUDED.hi`

// MaintainFinished implements queue.FinishedMaintainer for
// jobfence_jobs_finished: it creates partitions of PartitionSpan(retention)
// until PartitionsAhead(retention) past now, and drops every partition
// whose upper bound is retention or more ago (a partition that straddles
// the cutoff stays until all of it is past). No step takes a lock that
// stops completions, and each waits partitionLockWait at most for its
// locks (lock_timeout), so a session that holds a partition (a frozen
// reader) delays nobody: the call returns its error and the next one
// goes on.
//
//   - A partition is created as a table of its own, then attached (ATTACH
//     PARTITION takes a SHARE UPDATE EXCLUSIVE lock on the parent, which
//     inserts do not wait for), and the range completions move jobs into
//     (jobfence_finished_bounds) grows with it in the same transaction.
//   - A partition is dropped after the range is raised past it, by DETACH
//     PARTITION CONCURRENTLY (PostgreSQL 14 on) and a DROP of the table
//     detached; a detach that did not finish is finished (FINALIZE) by the
//     next call.
//
// Instances may run it at once: each step is read from the catalog just
// before it, and a step another instance took first (the table exists,
// is attached, is gone) is read again, not reported.
func (c *Client) MaintainFinished(ctx context.Context, retention time.Duration) (queue.FinishedMaintenance, error) {
	var res queue.FinishedMaintenance
	if retention < queue.MinFinishedRetention {
		return res, fmt.Errorf("pgqueue: finished jobs: retention %s: %w (at least %s); finished jobs stay in jobfence_jobs, pruned row by row",
			retention, queue.ErrRetentionTooShort, queue.MinFinishedRetention)
	}
	span, ahead := PartitionSpan(retention), PartitionsAhead(retention)
	var lastRaced string
	for range maxPartitionSteps {
		st, err := c.readPartitions(ctx)
		if err != nil {
			return res, fmt.Errorf("pgqueue: finished jobs: read partitions: %w", err)
		}
		res.Partitions, res.Until = 0, time.Time{}
		for _, p := range st.parts {
			if p.attached && !p.pending {
				res.Partitions++
			}
		}
		if _, hi, ok := st.run(st.now); ok {
			res.Until = hi
		}
		step := c.nextPartitionStep(st, span, ahead, retention)
		if step.run == nil {
			return res, nil
		}
		if err := step.run(ctx); err != nil {
			// A step another instance took first is read again, once:
			// the same step failing so twice is no race.
			if raced(err) && step.key != lastRaced {
				lastRaced = step.key
				continue
			}
			return res, fmt.Errorf("pgqueue: finished jobs: %w", err)
		}
		res.Created += step.created
		res.Dropped += step.dropped
	}
	return res, nil
}

// partitionStep is one DDL step of MaintainFinished: key names it, and
// created and dropped count the partitions it creates and drops.
type partitionStep struct {
	key              string
	run              func(context.Context) error
	created, dropped int
}

// nextPartitionStep returns the next step of MaintainFinished for st, one
// without run when nothing is left to do. Drops go first: they free what
// the fleet no longer needs, and a detach left pending blocks every other
// detach.
func (c *Client) nextPartitionStep(st partitionState, span, ahead, retention time.Duration) partitionStep {
	cutoff := st.now.Add(-retention)
	for _, p := range st.parts {
		if p.pending {
			return partitionStep{key: "finalize " + p.name, run: func(ctx context.Context) error {
				return c.detachPartition(ctx, p.name, "FINALIZE")
			}}
		}
	}
	for _, p := range st.parts {
		if p.hi.After(cutoff) {
			continue
		}
		if !p.attached {
			return partitionStep{key: "drop " + p.name, dropped: 1, run: func(ctx context.Context) error {
				return c.dropPartitionTable(ctx, p.name)
			}}
		}
		return partitionStep{key: "detach " + p.name, run: func(ctx context.Context) error {
			// Completions stop moving jobs into it first, then it leaves
			// the parent without a lock that stops them; the next step
			// drops the table.
			if err := c.raiseFinishedBound(ctx, p.hi); err != nil {
				return err
			}
			return c.detachPartition(ctx, p.name, "CONCURRENTLY")
		}}
	}
	lo, hi, ok := st.run(st.now)
	if ok && (st.boundLo == nil || st.bound == nil || !st.bound.Equal(hi) || st.boundLo.Before(lo)) {
		return partitionStep{key: "bounds", run: func(ctx context.Context) error { return c.setFinishedBounds(ctx, lo, hi) }}
	}
	if !ok {
		// Nothing covers now (a new installation, or maintenance stalled
		// past its partitions): start at the span that holds now, or
		// where the last partition before now ends, if later.
		lo = st.now.Truncate(span)
		for _, p := range st.parts {
			if p.attached && !p.pending && p.hi.After(lo) && !p.hi.After(st.now) {
				lo = p.hi
			}
		}
		hi = lo
	}
	if !hi.Before(st.now.Add(ahead)) {
		return partitionStep{}
	}
	next := hi.Add(span)
	// A partition another instance made with another span may start
	// before: stop at it, and the run goes on past it.
	for _, p := range st.parts {
		if p.attached && p.lo.After(hi) && p.lo.Before(next) {
			next = p.lo
		}
	}
	runLo, from := lo, hi
	return partitionStep{key: "create " + partitionName(from, next), created: 1, run: func(ctx context.Context) error {
		return c.createPartition(ctx, from, next, runLo)
	}}
}

// createPartition creates the partition [lo, hi) and attaches it, and
// sets the range completions move jobs into to [runLo, hi), in one
// transaction: a completion sees the partition and the range together.
func (c *Client) createPartition(ctx context.Context, lo, hi, runLo time.Time) error {
	name := pgx.Identifier{partitionName(lo, hi)}.Sanitize()
	return c.ddlTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+name+` (LIKE jobfence_jobs_finished INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`); err != nil {
			return fmt.Errorf("create partition %s: %w", name, err)
		}
		attach := fmt.Sprintf(`ALTER TABLE jobfence_jobs_finished ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')`,
			name, lo.UTC().Format(time.RFC3339), hi.UTC().Format(time.RFC3339))
		if _, err := tx.Exec(ctx, attach); err != nil {
			return fmt.Errorf("attach partition %s: %w", name, err)
		}
		if _, err := tx.Exec(ctx, boundsSQL, runLo, hi); err != nil {
			return fmt.Errorf("partition %s: set bounds: %w", name, err)
		}
		return nil
	})
}

// setFinishedBounds sets the range completions move jobs into.
func (c *Client) setFinishedBounds(ctx context.Context, lo, hi time.Time) error {
	return c.ddlTx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, boundsSQL, lo, hi)
		return err
	})
}

// raiseFinishedBound raises the lower bound of the range completions move
// jobs into to at least lo.
func (c *Client) raiseFinishedBound(ctx context.Context, lo time.Time) error {
	return c.ddlTx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE jobfence_finished_bounds SET lo = greatest(lo, $1), hi = greatest(hi, $1)`, lo)
		if err != nil {
			return fmt.Errorf("raise bounds: %w", err)
		}
		return nil
	})
}

// dropPartitionTable drops a partition's table once it is detached,
// with the durable steps, signals and attempts' logs of its jobs
// (jobfence_steps, jobfence_signals, jobfence_attempt_logs: a completed
// job's are kept while the job is, for its page, and go with it).
func (c *Client) dropPartitionTable(ctx context.Context, name string) error {
	return c.ddlTx(ctx, func(tx pgx.Tx) error {
		t := pgx.Identifier{name}.Sanitize()
		var there bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, t).Scan(&there); err != nil {
			return fmt.Errorf("drop partition %s: %w", name, err)
		}
		if !there {
			return nil // dropped already
		}
		// The lock the DROP needs, first: two instances dropping one
		// partition at once otherwise each read it (the deletes below)
		// and then each waited for the other's read to DROP it, a
		// deadlock. The second now waits (lock_timeout) and finds it gone.
		if _, err := tx.Exec(ctx, `LOCK TABLE `+t+` IN ACCESS EXCLUSIVE MODE`); err != nil {
			return fmt.Errorf("drop partition %s: %w", name, err)
		}
		for _, table := range []string{"jobfence_steps", "jobfence_signals", "jobfence_attempt_logs"} {
			if _, err := tx.Exec(ctx, `DELETE FROM `+table+` WHERE job_id IN (SELECT id FROM `+t+`)`); err != nil {
				return fmt.Errorf("drop the steps of partition %s: %w", name, err)
			}
		}
		if _, err := tx.Exec(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{name}.Sanitize()); err != nil {
			return fmt.Errorf("drop partition %s: %w", name, err)
		}
		return nil
	})
}

// ddlTx runs fn in a transaction whose lock waits last partitionLockWait
// at most, and each statement partitionStatementWait.
func (c *Client) ddlTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return c.txFrom(ctx, fmt.Sprintf("BEGIN; SET LOCAL lock_timeout = %d; SET LOCAL statement_timeout = %d",
		partitionLockWait.Milliseconds(), partitionStatementWait.Milliseconds()), fn)
}

// detachPartition detaches a partition CONCURRENTLY, or finishes a detach
// left pending (FINALIZE): outside a transaction, as PostgreSQL requires,
// on a connection of its own whose lock waits and statement are bounded
// for the duration, and given back as it was.
func (c *Client) detachPartition(ctx context.Context, name, how string) error {
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	set := fmt.Sprintf("SET lock_timeout = %d; SET statement_timeout = %d", partitionLockWait.Milliseconds(), partitionStatementWait.Milliseconds())
	if _, err := conn.Exec(ctx, set); err != nil {
		conn.Conn().Close(context.WithoutCancel(ctx))
		return err
	}
	_, err = conn.Exec(ctx, `ALTER TABLE jobfence_jobs_finished DETACH PARTITION `+pgx.Identifier{name}.Sanitize()+` `+how)
	if _, rerr := conn.Exec(context.WithoutCancel(ctx), "RESET lock_timeout; RESET statement_timeout"); rerr != nil {
		// A session whose settings could not be reset is not given back.
		conn.Conn().Close(context.WithoutCancel(ctx))
	}
	if err != nil {
		return fmt.Errorf("detach partition %s %s: %w", name, strings.ToLower(how), err)
	}
	return nil
}

// raced reports an error of a partition step that another instance's
// step explains: the table exists already or is gone, is attached already
// or not any more, overlaps a partition just attached, or another detach
// is pending. The step is then read again from the catalog.
func raced(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "42P07", // duplicate_table
		"23505", // unique_violation (two CREATE TABLEs of one name)
		"42710", // duplicate_object ("type ... already exists": the same race, seen from pg_type)
		"42P01", // undefined_table
		"42P17", // invalid_object_definition (overlap, already a partition)
		"42809", // wrong_object_type
		"55000": // object_not_in_prerequisite_state (a detach pending)
		return true
	}
	return false
}
