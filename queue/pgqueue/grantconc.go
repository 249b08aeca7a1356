package pgqueue

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/queue"
)

// grantConcurrencySQL is grantSQL for the common case: partitions ($1
// names, $2 parts) whose limit has no rate (a concurrency cap, or a
// sequence: Concurrency 1 holding through retries). It hands their free
// concurrency slots to their oldest limited jobs, up to $3 a partition,
// and makes those jobs available. Its reply is a row per queue
// (jobColumns NULL, its name, NULL, the jobs made available), whose
// workers the caller wakes once the transaction has committed
// (wakeReady), and a row per partition it did not serve (jobColumns NULL,
// its limit's name and the partition, then NULL or 0): NULL for a limit
// with a rate or none at all (a deleted limit's orphans), which grantSQL
// serves from then on; 0 for a sequence whose oldest waiting job's row
// another transaction held, which grantSQL serves this once, waiting for
// that row. (A batch of outcomes hands the slots it frees over with
// handOverSQL, which also claims for its worker.)
//
// It keeps grantSQL's guarantees with a smaller plan, whose start-up and
// windows were most of a grant's server time for one slot
// (docs/benchmarks/limits.md): each partition's slots are read once,
// with their holders (holdsSQL), into an array of its free slots and
// their generations and a count of the holders at or above the limit (a
// lowered limit), which the free slots must first make up for (a slot
// of a partition that backs off, openSQL, is not free); its
// waiting jobs are locked oldest first with SKIP LOCKED (a sequence's
// oldest or none, as handOverSQL takes it), and paired with the free
// slots by position (a multi-argument unnest), not by window functions.
// Each slot is then taken by compare-and-set on its generation, as in
// grantSQL, and skipped if another grant holds it, so that two grants
// never wait for each other and no slot goes to two jobs.
// A job becomes available only with the slot taken for it. Its update
// (g) looks at its state no more: z locked it as limited, and no other
// statement changes it before this one ends. A second look there
// (state = 'limited') let generic plans read the whole limited index
// instead of the primary key (docs/benchmarks/limits.md).
//
// It waits for no lock: every row it locks it takes with SKIP LOCKED,
// and it updates only rows it has locked, so a grant that runs beside a
// frozen one is never held up by it.
//
// transition: grant
var grantConcurrencySQL = `
WITH fr AS MATERIALIZED (
    SELECT l.name, p.pt, f.slots, f.gens, greatest(0, least($3::int, cardinality(f.slots) - f.above)) AS k,
        ` + sequenceSQL("l") + ` AS ordered
    FROM (SELECT DISTINCT n, pt FROM unnest($1::text[], $2::text[]) AS p(n, pt)) p
    JOIN jobfence_limits l ON l.name = p.n AND l.rate IS NULL AND l.fair_by = ''
    CROSS JOIN LATERAL (
        SELECT coalesce(array_agg(s.slot ORDER BY s.slot) FILTER (WHERE s.slot < l.concurrency AND j.id IS NULL AND ` + openSQL("s") + `), '{}') AS slots,
            array_agg(s.gen ORDER BY s.slot) FILTER (WHERE s.slot < l.concurrency AND j.id IS NULL AND ` + openSQL("s") + `) AS gens,
            count(j.id) FILTER (WHERE s.slot >= l.concurrency) AS above
        FROM jobfence_limit_slots s
        LEFT JOIN jobfence_jobs j ON j.id = s.job_id AND ` + holdsSQL + `
        WHERE s.name = l.name AND s.part = p.pt AND s.kind = 0
    ) f
), z AS MATERIALIZED (
    SELECT fr.name, fr.pt, z.slot, z.gen, z.id FROM fr CROSS JOIN LATERAL unnest(fr.slots, fr.gens, ARRAY(
        ` + nextWaitingSQL("id", "fr.ordered", "fr.name", "fr.pt", "fr.k") + `)) AS z(slot, gen, id)
    WHERE fr.k > 0 AND z.id IS NOT NULL AND z.slot IS NOT NULL
), lc AS MATERIALIZED (
    SELECT z.id, x.slot, x.ctid FROM z CROSS JOIN LATERAL (
        SELECT s.slot, s.ctid FROM jobfence_limit_slots s
        WHERE s.name = z.name AND s.part = z.pt AND s.kind = 0 AND s.slot = z.slot AND s.gen = z.gen
        FOR UPDATE SKIP LOCKED) x
), uc AS (
    UPDATE jobfence_limit_slots s SET job_id = (SELECT lc.id FROM lc WHERE lc.ctid = s.ctid), gen = s.gen + 1, granted_at = now()
    WHERE s.ctid = ANY (ARRAY(SELECT ctid FROM lc))
    RETURNING s.job_id, s.slot
), g AS (
    UPDATE jobfence_jobs j SET state = 'available', limit_slot = uc.slot, scheduled_at = now()
    FROM uc
    WHERE j.id = ANY (ARRAY(SELECT job_id FROM uc)) AND j.id = uc.job_id
    RETURNING j.queue
)
SELECT ` + claimReplyNulls + `, g.queue, NULL::text, count(*)::int, NULL::bigint, NULL::bigint[], NULL::tid[] FROM g GROUP BY g.queue
UNION ALL
SELECT ` + claimReplyNulls + `, p.n, p.pt, NULL, NULL, NULL, NULL FROM unnest($1::text[], $2::text[]) AS p(n, pt)
WHERE NOT EXISTS (SELECT FROM fr WHERE fr.name = p.n AND fr.pt = p.pt)
UNION ALL
SELECT ` + claimReplyNulls + `, fr.name, fr.pt, 0, NULL, NULL, NULL FROM fr
WHERE fr.ordered AND fr.k > 0 AND NOT EXISTS (SELECT FROM z WHERE z.name = fr.name AND z.pt = fr.pt)
  AND EXISTS (SELECT FROM jobfence_jobs
      WHERE state = 'limited' AND ` + waitingInSQL("", "fr.name", "fr.pt") + `)`

// genericPlanSQL gives the statements after it in a transaction a
// generic plan (see grantSettingsSQL), without grantSettingsSQL's
// lock_timeout: finishAndGrant's outcomes keep their own bounds.
const genericPlanSQL = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true)`

// grantRoutes remembers the limits whose partitions grantSQL serves, as
// this client's grants found them, so that their grants go there at once
// rather than through grantConcurrencySQL or handOverSQL first (a round
// trip more each time). A limit not remembered is tried as a limit with
// no rate: it is the common case, and both statements say which
// partitions they did not serve. A limit is remembered fullRouteFor, so
// that one whose rate is taken away gets the cheaper statements again.
type grantRoutes struct {
	mu   sync.Mutex
	full map[string]time.Time
}

const (
	// fullRouteFor is how long a limit found to need grantSQL is sent
	// there without asking again.
	fullRouteFor = 10 * time.Second
	// maxFullRoutes bounds the limits remembered; past it the oldest
	// knowledge is dropped, and those limits' grants ask again.
	maxFullRoutes = 1000
)

// split returns the partitions of ps that grantConcurrencySQL or
// handOverSQL may serve and those to send to grantSQL at once.
func (r *grantRoutes) split(ps []partition, now time.Time) (conc, full []partition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range ps {
		if until, ok := r.full[p.name]; ok && now.Before(until) {
			full = append(full, p)
		} else {
			conc = append(conc, p)
		}
	}
	return conc, full
}

// markFull remembers the limits of ps as needing grantSQL.
func (r *grantRoutes) markFull(ps []partition, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.full == nil || len(r.full)+len(ps) > maxFullRoutes {
		r.full = map[string]time.Time{}
	}
	for _, p := range ps {
		r.full[p.name] = now.Add(fullRouteFor)
	}
}

// grantPlan is what one grant batch serves: chunks of partitions for
// grantConcurrencySQL (conc) and for grantSQL (full), and whether it
// creates missing slots first (ensure, see queueGrant).
type grantPlan struct {
	conc, full [][]partition
	ensure     bool
}

// planGrant routes ps (see grantRoutes) and chunks them.
func (c *Client) planGrant(ps []partition, ensure bool) grantPlan {
	conc, full := c.routes.split(ps, time.Now())
	return grantPlan{conc: grantChunks(conc), full: grantChunks(full), ensure: ensure}
}

// queueConcGrant queues grantConcurrencySQL for each chunk.
func queueConcGrant(b *pgx.Batch, chunks [][]partition) {
	for _, ch := range chunks {
		names, parts := chunkArrays(ch)
		b.Queue(grantConcurrencySQL, names, parts, grantBatch)
	}
}

// readConcGrant reads the replies of queueConcGrant's statements, adding
// the jobs made available per queue to out; it returns the partitions the
// statements did not serve, which grantSQL must: those of a limit they
// cannot serve (declined), and the sequences whose oldest job another
// transaction held (again).
func readConcGrant(br pgx.BatchResults, chunks [][]partition, out map[string]int) (declined, again []partition, err error) {
	for range chunks {
		_, d, a, err := readGrantReply(br, out)
		if err != nil {
			return nil, nil, err
		}
		declined, again = append(declined, d...), append(again, a...)
	}
	return declined, again, nil
}

// readGrantReply reads the reply of one grantConcurrencySQL or
// handOverSQL statement, adding the jobs made available per queue to out:
// what it claimed (a nil fence if nothing; handOverSQL's only), the
// partitions it did not serve because their limit has a rate or is gone
// (declined, for grantSQL from then on), and those of a limit with no
// rate that it left to be granted again (again: a sequence whose oldest
// job another transaction held, or, from handOverSQL, a partition whose
// outcomes freed no slot it could take).
func readGrantReply(br pgx.BatchResults, out map[string]int) (claim claimReply, declined, again []partition, err error) {
	rows, err := br.Query()
	if err != nil {
		return claim, nil, nil, err
	}
	summary := make([]any, claimJobColumns, claimJobColumns+6)
	var name, part *string
	var n *int
	var fence *int64
	var ids []int64
	var ctids []pgtype.TID
	summary = append(summary, &name, &part, &n, &fence, &ids, &ctids)
	for rows.Next() {
		if rows.RawValues()[0] != nil {
			var j *queue.Job
			if j, err = scanJob(rows, nil, nil, nil, nil, nil, nil); err != nil {
				break
			}
			if claim.jobs == nil {
				claim.jobs = make(map[int64]*queue.Job)
			}
			claim.jobs[j.ID] = j
			continue
		}
		if err = rows.Scan(summary...); err != nil {
			break
		}
		// Each summary row sets one of these; whatever its place
		// among the others, whose scans set it to nil.
		switch {
		case fence != nil:
			claim.fence, claim.ids, claim.ctids = fence, ids, ctids
		case part != nil && n != nil:
			again = append(again, partition{deref(name), *part})
		case part != nil:
			declined = append(declined, partition{deref(name), *part})
		case n != nil:
			out[deref(name)] += *n
		}
	}
	rows.Close()
	if err == nil {
		err = rows.Err()
	}
	return claim, declined, again, err
}

// claimedJobs returns the jobs of a claim that a batch of outcomes or a
// release made (handOverSQL, scanReleased): those whose rows came inline,
// and the others read after the batch committed, by their row versions,
// as a claim's are (claimReply.jobsVia), on a connection taken only then.
// Past the inline reply's bound the rows are read rather than sent before
// the commit, so that a silent client's batch still commits (the reply
// fits in the sockets' buffers) while the batch claims as many jobs as its
// outcomes freed slots for. If a read fails, the jobs are leased all the
// same: they are rescued when the lease expires, as the jobs of a claimer
// that died.
func (c *Client) claimedJobs(ctx context.Context, r claimReply, traces bool) ([]*queue.Job, error) {
	if r.fence == nil || len(r.ids) == 0 {
		return nil, nil
	}
	var conn *pgxpool.Conn
	if len(r.jobs) < len(r.ids) {
		var err error
		if conn, err = c.pool.Acquire(ctx); err != nil {
			return nil, err
		}
		defer conn.Release()
	}
	return r.jobsVia(ctx, conn, traces)
}

// chunkArrays returns a chunk's limit names and partitions as the
// statements' two arrays.
func chunkArrays(ch []partition) (names, parts []string) {
	names = make([]string, len(ch))
	parts = make([]string, len(ch))
	for i, p := range ch {
		names[i], parts[i] = p.name, p.part
	}
	return names, parts
}
