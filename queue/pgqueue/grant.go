package pgqueue

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// grantBatch bounds the partitions one GrantWaiting call serves, and the
// jobs one grant makes available in a partition.
const grantBatch = 1000

// ensureSlotsSQL makes the slot rows of partitions ($1 names, $2 parts)
// that their limits' sizes call for and that do not exist yet. A slot is a
// row so that a grant can take it alone (compare-and-set on gen), never
// waiting for the grants of other slots. Only grants insert slots, each in
// a statement of its own transaction, so a conflicting insert waits at most
// for another grant's statement. A new slot (a limit raised, or given a
// rate) takes its partition's backoff, so that it grants nothing before
// the others do.
const ensureSlotsSQL = `
INSERT INTO jobfence_limit_slots (name, part, kind, slot, backoff_until)
SELECT l.name, p.pt, k.kind, g.g,
    (SELECT max(b.backoff_until) FROM jobfence_limit_slots b WHERE b.name = l.name AND b.part = p.pt)
FROM (SELECT DISTINCT n, pt FROM unnest($1::text[], $2::text[]) AS p(n, pt)) p
JOIN jobfence_limits l ON l.name = p.n
CROSS JOIN LATERAL (VALUES (0::smallint, l.concurrency), (1::smallint, l.rate)) AS k(kind, size)
CROSS JOIN LATERAL generate_series(0, k.size - 1) AS g(g)
WHERE k.size IS NOT NULL
  AND (SELECT count(*) FROM jobfence_limit_slots s WHERE s.name = l.name AND s.part = p.pt AND s.kind = k.kind) < k.size
ON CONFLICT DO NOTHING`

// grantSQL hands the free slots of partitions ($1 names, $2 parts) to
// their oldest limited jobs, up to $3 a partition, and makes those jobs
// available; the caller wakes their queues once the transaction has
// committed (wakeReady). Jobs of a partition whose limit no longer exists
// are made available without a slot.
//
// The free slots are read, without locks, from the statement's snapshot:
// a concurrency slot is free when its job no longer holds it (holdsSQL), a
// rate slot when a Period has passed since it was granted and since its
// job's last start, and that job is not waiting to start; neither while
// its partition backs off (openSQL: a handler's JobRateLimited), so that
// the partition grants nothing until its backoff ends. Each slot is
// then taken by compare-and-set on its generation, which every grant
// bumps: it is locked (lc, lr) only if its gen is still the one read
// (the lock re-checks it on the newest version), and skipped if another
// grant holds it, so that grants that read the same slots free never wait
// for each other (the waits once took most of a grant's time under a
// global limit): of two, the one that locks a slot first takes it, the
// other skips it, or finds its gen changed and leaves it. A job becomes available only if each slot
// its limit calls for was taken for it; a slot taken for a job that then
// was not granted is held by no one (its job is not available), so it is
// free again for the next grant (a rate slot after its Period). No job
// can start holding a slot except through this statement, so a slot read
// as free stays free until a grant takes it.
//
// A lowered limit leaves jobs holding slots at or above it: each such
// holder (a rate slot granted within the Period) counts against the free
// slots below it, so no grant goes past the new value.
//
// The waiting jobs are read through jobfence_jobs_limited, in its order
// (oldestWaitingSQL). Only a deleted limit's partitions (gone,
// materialized first) are looked at for orphans: looking at every
// partition's waiting jobs before checking that its limit was gone locked
// a batch of them in every grant. The
// updates (g, o) look at the jobs' state no more: w0 and orphans locked
// them as limited, and nothing else changes a locked row before the
// statement ends; a second look let generic plans read the whole limited
// index (see grantConcurrencySQL). The jobs' update finds them by their
// IDs as an array (ANY): a join alone let a generic plan, its estimate
// of the paired jobs taken from the limit's LIMIT, read the whole table
// to hash it (see handOverSQL).
//
// The waiting jobs are locked in ID order, as every grant locks them. A
// sequence's (ordered: Concurrency 1, holding through retries) are waited
// for, so that the job with the lowest ID goes first, each wait for one
// statement of another grant or an admin command, bounded by the batch's
// lock_timeout (grantWait), so a frozen holder delays a grant by that
// much and no more (TestGrantWaitIsBounded, TestFrozenGranterHoldsUpNoGrant);
// other limits' are taken with SKIP LOCKED, the oldest that no one holds,
// and wait for nothing. A sequence's partition comes here only when
// grantConcurrencySQL or handOverSQL found its oldest job held, which
// neither waits for.
//
// transition: grant
var grantSQL = `
WITH l AS MATERIALIZED (
    SELECT p.n, p.pt, m.concurrency, m.rate, m.period_us, m.hold_retrying, m.hold_discarded, m.fair_by, m.fair_weights
    FROM (SELECT DISTINCT n, pt FROM unnest($1::text[], $2::text[]) AS p(n, pt)) p
    JOIN jobfence_limits m ON m.name = p.n
), cs AS MATERIALIZED (
    SELECT s.name, s.part, s.slot, s.gen, row_number() OVER (PARTITION BY s.name, s.part ORDER BY s.slot) AS rn
    FROM jobfence_limit_slots s JOIN l ON s.name = l.n AND s.part = l.pt
    WHERE s.kind = 0 AND s.slot < l.concurrency AND ` + openSQL("s") + `
      AND NOT EXISTS (SELECT FROM jobfence_jobs j WHERE j.id = s.job_id AND ` + holdsSQL + `)
), rs AS MATERIALIZED (
    SELECT s.name, s.part, s.slot, s.gen, row_number() OVER (PARTITION BY s.name, s.part ORDER BY s.slot) AS rn
    FROM jobfence_limit_slots s JOIN l ON s.name = l.n AND s.part = l.pt
    WHERE s.kind = 1 AND s.slot < l.rate AND ` + openSQL("s") + `
      AND coalesce(s.granted_at < now() - l.period_us * interval '1 microsecond', true)
      AND NOT EXISTS (SELECT FROM jobfence_jobs j WHERE j.id = s.job_id
          AND (j.state = 'available' OR j.attempted_at >= now() - l.period_us * interval '1 microsecond'))
), k AS MATERIALIZED (
    SELECT l.n, l.pt, l.concurrency, l.rate, coalesce(` + sequenceSQL("l") + `, false) AS ordered,
        l.fair_by <> '' AS fair, l.fair_weights AS wts, fc.last_fair AS cur, coalesce(fc.taken, 0) AS taken, greatest(0, least($3::int,
        CASE WHEN l.concurrency IS NULL THEN $3 ELSE (SELECT count(*) FROM cs WHERE cs.name = l.n AND cs.part = l.pt)
            - (SELECT count(*) FROM jobfence_limit_slots s
               WHERE s.name = l.n AND s.part = l.pt AND s.kind = 0 AND s.slot >= l.concurrency
                 AND EXISTS (SELECT FROM jobfence_jobs j WHERE j.id = s.job_id AND ` + holdsSQL + `)) END,
        CASE WHEN l.rate IS NULL THEN $3 ELSE (SELECT count(*) FROM rs WHERE rs.name = l.n AND rs.part = l.pt)
            - (SELECT count(*) FROM jobfence_limit_slots s
               WHERE s.name = l.n AND s.part = l.pt AND s.kind = 1 AND s.slot >= l.rate
                 AND s.granted_at >= now() - l.period_us * interval '1 microsecond') END)) AS k
    FROM l LEFT JOIN jobfence_limit_fair fc ON l.fair_by <> '' AND fc.name = l.n AND fc.part = l.pt
), fw AS MATERIALIZED (
    SELECT k.n, k.pt, x.* FROM k CROSS JOIN LATERAL (
        ` + fairWaitingSQL("k") + `
    ) x
    WHERE k.k > 0 AND k.fair
), w0 AS MATERIALIZED (
    SELECT x.id, k.n, k.pt FROM k CROSS JOIN LATERAL (
        ` + oldestWaitingSQL("id", "true", "k.n", "k.pt", "k.k", "FOR UPDATE") + `
    ) x
    WHERE k.k > 0 AND k.ordered
    UNION ALL
    SELECT x.id, k.n, k.pt FROM k CROSS JOIN LATERAL (
        ` + oldestWaitingSQL("id", "true", "k.n", "k.pt", "k.k", "FOR UPDATE SKIP LOCKED") + `
    ) x
    WHERE k.k > 0 AND NOT k.ordered AND NOT k.fair
    UNION ALL
    SELECT fw.id, fw.n, fw.pt FROM fw
), w AS MATERIALIZED (
    SELECT w0.id, k.n, k.pt, k.concurrency, k.rate, row_number() OVER (PARTITION BY k.n, k.pt ORDER BY w0.id) AS rn
    FROM w0 JOIN k ON k.n = w0.n AND k.pt = w0.pt
), pair AS MATERIALIZED (
    SELECT w.id, w.n, w.pt, w.concurrency, w.rate, c.slot AS cslot, c.gen AS cgen, r.slot AS rslot, r.gen AS rgen
    FROM w
    LEFT JOIN cs c ON c.name = w.n AND c.part = w.pt AND c.rn = w.rn
    LEFT JOIN rs r ON r.name = w.n AND r.part = w.pt AND r.rn = w.rn
), lc AS MATERIALIZED (
    SELECT p.id, s.name, s.part, s.slot FROM pair p JOIN jobfence_limit_slots s
        ON s.name = p.n AND s.part = p.pt AND s.kind = 0 AND s.slot = p.cslot AND s.gen = p.cgen
    FOR UPDATE OF s SKIP LOCKED
), lr AS MATERIALIZED (
    SELECT p.id, s.name, s.part, s.slot FROM pair p JOIN jobfence_limit_slots s
        ON s.name = p.n AND s.part = p.pt AND s.kind = 1 AND s.slot = p.rslot AND s.gen = p.rgen
    FOR UPDATE OF s SKIP LOCKED
), uc AS (
    UPDATE jobfence_limit_slots s SET job_id = lc.id, gen = s.gen + 1, granted_at = now()
    FROM lc
    WHERE s.name = lc.name AND s.part = lc.part AND s.kind = 0 AND s.slot = lc.slot
    RETURNING lc.id
), ur AS (
    UPDATE jobfence_limit_slots s SET job_id = lr.id, gen = s.gen + 1, granted_at = now()
    FROM lr
    WHERE s.name = lr.name AND s.part = lr.part AND s.kind = 1 AND s.slot = lr.slot
    RETURNING lr.id
), gone AS MATERIALIZED (
    SELECT p.n, p.pt FROM (SELECT DISTINCT n, pt FROM unnest($1::text[], $2::text[]) AS p(n, pt)) p
    WHERE NOT EXISTS (SELECT FROM jobfence_limits m WHERE m.name = p.n)
), orphans AS MATERIALIZED (
    SELECT x.id FROM gone p
    CROSS JOIN LATERAL (
        ` + oldestWaitingSQL("id", "true", "p.n", "p.pt", "$3", "FOR UPDATE SKIP LOCKED") + `
    ) x
), g AS (
    UPDATE jobfence_jobs j
    SET state = 'available', limit_slot = p.cslot, scheduled_at = now()
    FROM pair p
    WHERE j.id = ANY (ARRAY(SELECT id FROM pair)) AND j.id = p.id
      AND (p.concurrency IS NULL OR p.id IN (SELECT id FROM uc))
      AND (p.rate IS NULL OR p.id IN (SELECT id FROM ur))
    RETURNING j.queue, j.id
), fc AS MATERIALIZED (
    SELECT DISTINCT ON (fw.n, fw.pt) fw.n, fw.pt, fw.fair, fw.turn
    FROM fw WHERE fw.id IN (SELECT id FROM g)
    ORDER BY fw.n, fw.pt, fw.rnd DESC, fw.pos DESC, fw.j DESC
), fl AS MATERIALIZED (
    SELECT c.ctid, fc.fair, fc.turn FROM fc JOIN jobfence_limit_fair c ON c.name = fc.n AND c.part = fc.pt
    FOR UPDATE OF c SKIP LOCKED
), uf AS (
    UPDATE jobfence_limit_fair c SET last_fair = fl.fair, taken = fl.turn
    FROM fl WHERE c.ctid = ANY (ARRAY(SELECT ctid FROM fl)) AND c.ctid = fl.ctid
), nf AS (
    INSERT INTO jobfence_limit_fair (name, part, last_fair, taken)
    SELECT fc.n, fc.pt, fc.fair, fc.turn FROM fc
    WHERE NOT EXISTS (SELECT FROM jobfence_limit_fair c WHERE c.name = fc.n AND c.part = fc.pt)
    ON CONFLICT DO NOTHING
), o AS (
    UPDATE jobfence_jobs j
    SET state = 'available', limit_slot = NULL, scheduled_at = now()
    WHERE j.id = ANY (ARRAY(SELECT id FROM orphans))
    RETURNING j.queue
)
SELECT q.queue, count(*)
FROM (SELECT queue FROM g UNION ALL SELECT queue FROM o) q
GROUP BY q.queue`

// grantSettingsSQL sets, for a grant's transaction, its lock_timeout
// (grantWait, in milliseconds) and a generic plan for its statements: left to
// choose, PostgreSQL planned grantSQL anew at every run (a custom plan),
// and planning it cost several times what running it did
// (docs/benchmarks/limits.md). The generic plan is the one that
// TestGrantReadsNoWaitingJobs checks.
const grantSettingsSQL = `SELECT set_config('lock_timeout', $1::bigint::text, true), set_config('plan_cache_mode', 'force_generic_plan', true)`

// grantChunk bounds the partitions one grantSQL statement serves: its
// pairing of waiting jobs with free slots joins the partitions' rows to
// each other's, a cost that grows as the square of their number (1,000
// partitions took a second a grant); a grant of more partitions sends a
// statement per chunk, in its one batch and transaction.
const grantChunk = 32

// grantWait bounds a grant's wait for a row another grant holds: its
// statement's, never a client's (no grant runs in a caller's transaction).
const grantWait = time.Second

// grant serves the partitions ps: it creates their slots, then hands free
// slots to waiting jobs, and learns when the rates that still hold jobs
// back free their next slots (nextRefillSQL, see refills), in one
// transaction of statements sent together in one batch, a chunk of
// partitions a statement (grantChunk). Partitions of a limit with no rate
// go to grantConcurrencySQL, the others to grantSQL (see grantRoutes);
// those that the first finds it cannot serve, and the sequences whose
// oldest job it found held, are granted by the second in a batch after.
// It returns how many jobs it made available per queue.
func (c *Client) grant(ctx context.Context, ps []partition) (map[string]int, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	out := map[string]int{}
	declined, again, err := c.grantBatch(ctx, c.planGrant(ps, true), out)
	if err == nil && len(declined)+len(again) > 0 {
		c.routes.markFull(declined, time.Now())
		_, _, err = c.grantBatch(ctx, grantPlan{full: grantChunks(append(declined, again...)), ensure: false}, out)
	}
	// What a batch that failed counted was rolled back: its wake-ups are
	// spurious, not lost. One that committed before the other failed
	// made its jobs available.
	c.wakeReady(ctx, out)
	if err != nil {
		return nil, fmt.Errorf("pgqueue: grant limit slots: %w", err)
	}
	return out, nil
}

// grantBatch sends the grant g in one batch, adds the jobs it made
// available per queue to out, and returns the partitions that
// grantConcurrencySQL did not serve (see readConcGrant).
func (c *Client) grantBatch(ctx context.Context, g grantPlan, out map[string]int) (declined, again []partition, err error) {
	var b pgx.Batch
	queueGrant(&b, g)
	// One batch is one implicit transaction, which the server commits
	// at the batch's end without waiting for this client: a grant whose
	// client froze after sending it holds no slot or job row.
	br := c.pool.SendBatch(ctx, &b)
	declined, again, err = c.readGrant(br, g, out)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return declined, again, err
}

// grantChunks sorts ps, so that two grants lock their chunks' rows alike,
// and splits them into chunks of grantChunk partitions.
func grantChunks(ps []partition) [][]partition {
	ps = slices.Clone(ps)
	slices.SortFunc(ps, func(a, b partition) int {
		return cmp.Or(cmp.Compare(a.name, b.name), cmp.Compare(a.part, b.part))
	})
	var chunks [][]partition
	for len(ps) > 0 {
		n := min(len(ps), grantChunk)
		chunks, ps = append(chunks, ps[:n]), ps[n:]
	}
	return chunks
}

// queueGrant queues in b the statements of the grant g: its settings,
// then ensureSlotsSQL per chunk (if g.ensure), grantConcurrencySQL per
// chunk of g.conc, and grantSQL and nextRefillSQL per chunk of g.full.
// They must run in one transaction of their own, that no statement
// queued before them is part of (its commit would wait for the grant's).
//
// A grant of the partitions whose slots jobs just gave back (a
// completion's) leaves ensure out: those slots exist, and the statement
// was a quarter of the grant's statements. What it would add there, the
// slots of a limit raised or given a rate since, the next grant pass adds
// (GrantWaiting, and SetLimit's own); until then the partition is granted
// fewer slots than its limit, never more.
func queueGrant(b *pgx.Batch, g grantPlan) {
	b.Queue(grantSettingsSQL, grantWait.Milliseconds())
	if g.ensure {
		for _, ch := range append(slices.Clone(g.conc), g.full...) {
			names, parts := chunkArrays(ch)
			b.Queue(ensureSlotsSQL, names, parts)
		}
	}
	queueConcGrant(b, g.conc)
	queueFullGrant(b, g.full)
}

// queueFullGrant queues grantSQL and nextRefillSQL for each chunk.
func queueFullGrant(b *pgx.Batch, chunks [][]partition) {
	for _, ch := range chunks {
		names, parts := chunkArrays(ch)
		b.Queue(grantSQL, names, parts, grantBatch)
		queueNextRefill(b, names, parts)
	}
}

// readGrant reads the replies to the statements queueGrant queued for g,
// adds the jobs the grant made available per queue to out, and returns
// the partitions grantConcurrencySQL did not serve (see readConcGrant).
func (c *Client) readGrant(br pgx.BatchResults, g grantPlan, out map[string]int) (declined, again []partition, err error) {
	if _, err := br.Exec(); err != nil {
		return nil, nil, err
	}
	if g.ensure {
		for range len(g.conc) + len(g.full) {
			if _, err := br.Exec(); err != nil {
				return nil, nil, err
			}
		}
	}
	if declined, again, err = readConcGrant(br, g.conc, out); err != nil {
		return nil, nil, err
	}
	return declined, again, c.readFullGrant(br, g.full, out)
}

// readFullGrant reads the replies of queueFullGrant's statements, adding
// the jobs made available per queue to out.
func (c *Client) readFullGrant(br pgx.BatchResults, chunks [][]partition, out map[string]int) error {
	var err error
	for _, ch := range chunks {
		if err == nil {
			var rows pgx.Rows
			rows, err = br.Query()
			if err == nil {
				for rows.Next() {
					var q string
					var n int
					if err = rows.Scan(&q, &n); err != nil {
						break
					}
					out[q] += n
				}
				rows.Close()
				if err == nil {
					err = rows.Err()
				}
			}
		}
		if err == nil {
			var rows pgx.Rows
			if rows, err = br.Query(); err == nil {
				err = c.refills.record(ch, rows)
				rows.Close()
			}
		}
	}
	return err
}

// waitingPartitionsSQL lists up to $3 partitions that have limited jobs,
// from the first after ($1, $2), reading one entry of jobfence_jobs_limited
// per partition (a loose index scan): its cost is the number of
// partitions, not of waiting jobs.
const waitingPartitionsSQL = `
WITH RECURSIVE p(n, pt, i) AS (
    (SELECT limit_name, limit_part, 1 FROM jobfence_jobs
     WHERE state = 'limited' AND limit_name IS NOT NULL AND (limit_name, limit_part) > ($1, $2)
     ORDER BY limit_name, limit_part LIMIT 1)
    UNION ALL
    SELECT x.limit_name, x.limit_part, p.i + 1 FROM p CROSS JOIN LATERAL (
        SELECT limit_name, limit_part FROM jobfence_jobs
        WHERE state = 'limited' AND limit_name IS NOT NULL AND (limit_name, limit_part) > (p.n, p.pt)
        ORDER BY limit_name, limit_part LIMIT 1) x
    WHERE p.i < $3
)
SELECT n, pt FROM p`

// GrantWaiting hands free limit slots to waiting jobs in up to limit
// partitions that have some, and returns how many jobs it made available
// per queue. Completions, failures and inserts grant in their own
// partitions at once; this pass catches the slots that free otherwise: a
// rescued job's, a raised limit's, a rate's period passing, a grant that
// failed. Every worker runs it with its promoter (worker.Config.
// PromoteInterval); any number of instances may run it at once. A call
// goes on from where this client's last call stopped, so that more than
// limit partitions are all served in turn.
func (c *Client) GrantWaiting(ctx context.Context, limit int) (map[string]int, error) {
	if limit <= 0 {
		return nil, nil
	}
	c.grantCursor.Lock()
	from := c.grantCursor.p
	c.grantCursor.Unlock()
	ps, err := c.waitingPartitions(ctx, from, limit)
	if err != nil {
		return nil, err
	}
	if len(ps) < limit && from != (partition{}) {
		// Wrap around to the partitions before the cursor.
		more, err := c.waitingPartitions(ctx, partition{}, limit-len(ps))
		if err != nil {
			return nil, err
		}
		ps = append(ps, more...)
	}
	next := partition{}
	if len(ps) == limit {
		next = ps[len(ps)-1]
	}
	c.grantCursor.Lock()
	c.grantCursor.p = next
	c.grantCursor.Unlock()
	return c.grant(ctx, ps)
}

func (c *Client) waitingPartitions(ctx context.Context, from partition, limit int) ([]partition, error) {
	rows, err := c.pool.Query(ctx, waitingPartitionsSQL, from.name, from.part, limit)
	if err != nil {
		return nil, fmt.Errorf("pgqueue: grant limit slots: find waiting jobs: %w", err)
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (partition, error) {
		var p partition
		err := r.Scan(&p.name, &p.part)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("pgqueue: grant limit slots: find waiting jobs: %w", err)
	}
	seen := map[partition]bool{}
	out := ps[:0]
	for _, p := range ps {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out, nil
}

// grantAfter grants in the partitions of jobs that just changed (an
// insert, an outcome); a failure is logged, not returned: the change is
// committed, and the workers' next GrantWaiting pass grants instead.
func (c *Client) grantAfter(ctx context.Context, ps []partition) map[string]int {
	if len(ps) == 0 {
		return nil
	}
	byQueue, err := c.grant(ctx, ps)
	if err != nil {
		c.cfg.Logger.Warn("pgqueue: granting limit slots failed; the workers' next pass grants them", "err", err)
	}
	return byQueue
}
