package pgqueue

import (
	"time"

	"github.com/jackc/pgx/v5"
)

// handOverSQL passes each concurrency slot that this transaction's
// outcomes freed straight to the next limited job of its partition: the
// grant of a batch of outcomes (finishAndGrant), for the limits with no
// rate (a concurrency cap or a sequence). $8 are the IDs of the batch's
// limited jobs; $1 and $2 name their partitions and $3 the jobs to claim
// in each for the worker that sent the outcomes, leased for $4
// microseconds, attempted by $5. Its
// reply is a claim's: a row of the fence and the claimed jobs' IDs and
// row versions, and the rows of the first of them (by ID, at most $7,
// whose rows come to at most $6 bytes: claimRowBytes), so that the reply
// fits in the sockets' buffers and the batch commits whether or not its
// client reads (claimedJobs reads the others after the commit). Then a
// row per queue (jobColumns NULL, its name, NULL, the jobs made
// available), and a row per partition of $1 and $2 it did not serve
// (jobColumns NULL, the limit's name and the partition, then 0 where the
// limit has no rate, which the general grant serves after the commit, and
// NULL where it has one or is gone, which grantSQL serves).
//
// A grant reads every slot of a partition with its holder, pairs the free
// ones with the oldest limited jobs, and takes each slot again by
// compare-and-set: several times an unlimited claim's work a job where
// partitions are many (docs/benchmarks/limits.md). Here the slot is known:
// the one the finished job names (limit_slot), whose row names the job
// back. The hand-over locks that row (SKIP LOCKED) if its job is this
// transaction's (the job's row version is ours: an applied outcome, not a
// zombie's stale one, which wrote nothing) and no longer holds it (a
// completion, a failure, a discard or a cancel, as the limit's hold
// options say: holdsSQL), then leaves out a partition with a holder at or
// above the limit (a lowered limit, which the freed slots must first make
// up for; holdsSQL again, each freed slot's row, which carries its limit's
// hold options, standing for the limit's row l). That check looks for
// the partition's slots above the limit, and for each one found it probes
// the holder by key: written as a join of the slots to their holders, a
// generic plan for a limit of many slots merged the partition's slots
// with the whole jobs table in ID order, once for each freed slot
// (TestHandOverUnderAWideLimit). The partition's oldest limited jobs, one
// per freed slot, are locked with SKIP LOCKED and paired with the freed
// slots as they come (any pairing will do: every one of those slots is
// free). A sequence's (ordered: Concurrency 1, holding through retries)
// must go in insert order: its oldest limited job is found first, then
// locked with SKIP LOCKED, so that a row another transaction holds is not
// passed over; the partition then gets nothing here, and is left to the
// general grant, which waits for the row (grantSQL). Each slot's row then
// names its job, and the job is claimed as claimSQL claims (running,
// attempt + 1, leased, under a fence drawn once every row of the claim is
// locked) if its partition's $3 allows and its queue is not paused, or
// else made available with its slot. The jobs' update does not look at
// their state again (they were locked as limited: see grantConcurrencySQL)
// and finds them by their IDs as an array (ANY): joined to z alone, a
// generic plan that took z's size from its LIMIT's estimate (hundreds of
// rows) read the whole jobs table of a small queue to hash it, for a few
// jobs a batch (TestHandOverReadsOnlyWhatItHands). A slot is never handed
// twice: its row is locked from the check to the update, and its holder
// frees it once.
//
// What it leaves to the general grant, after the commit: a partition of
// the batch none of whose slots it handed over although its limit has no
// rate (a slot whose row another transaction held, a lowered limit, an
// outcome that freed nothing, such as a put-back, a partition that backs
// off (openSQL: its slots are handed to no one until the backoff ends),
// or a sequence whose oldest job another transaction held). A free slot
// with waiting jobs that no outcome of the batch freed (left by a failed grant, or by an
// insert in a caller's transaction, which grants nothing) waits for the
// workers' grant pass. Like grantConcurrencySQL it waits for no lock.
//
// transition: grant
var handOverSQL = `
WITH o AS MATERIALIZED (
    SELECT o.id, o.limit_name, o.limit_part, o.limit_slot, o.state FROM jobfence_jobs o
    WHERE o.id = ANY ($8::bigint[]) AND o.xmin = pg_current_xact_id()::xid
), fo AS MATERIALIZED (
    SELECT s.name, s.part, s.slot, s.ctid AS sctid, l.concurrency, l.hold_retrying, l.hold_discarded,
        ` + sequenceSQL("l") + ` AS ordered
    FROM o
    JOIN jobfence_limits l ON l.name = o.limit_name AND l.rate IS NULL AND l.fair_by = ''
    JOIN jobfence_limit_slots s ON s.name = o.limit_name AND s.part = o.limit_part AND s.kind = 0 AND s.slot = o.limit_slot
    WHERE s.job_id = o.id AND o.limit_slot < l.concurrency AND ` + openSQL("s") + `
      AND NOT ` + holdingSQL("o", "l") + `
    FOR UPDATE OF s SKIP LOCKED
), c AS (
    SELECT n, pt, sum(c)::int AS cap FROM unnest($1::text[], $2::text[], $3::int[]) AS c(n, pt, c) GROUP BY n, pt
), p AS MATERIALIZED (
    SELECT l.name, l.part, coalesce(min(c.cap), 0) AS cap, bool_or(l.ordered) AS ordered,
        array_agg(l.slot ORDER BY l.slot) AS slots, array_agg(l.sctid ORDER BY l.slot) AS sctids
    FROM fo l LEFT JOIN c ON c.n = l.name AND c.pt = l.part
    WHERE NOT EXISTS (
        SELECT FROM jobfence_limit_slots s
        WHERE s.name = l.name AND s.part = l.part AND s.kind = 0 AND s.slot >= l.concurrency
          AND (SELECT true FROM jobfence_jobs j WHERE j.id = s.job_id AND ` + holdsSQL + `))
    GROUP BY l.name, l.part
), z AS MATERIALIZED (
    SELECT p.name, p.part, p.slots[x.rn] AS slot, p.sctids[x.rn] AS sctid, x.id,
        x.rn <= p.cap AND x.queue NOT IN (SELECT name FROM jobfence_queues WHERE paused_at IS NOT NULL) AS claimed
    FROM p CROSS JOIN LATERAL (
        SELECT w.id, w.queue, row_number() OVER () AS rn FROM (
            ` + nextWaitingSQL("id, queue", "p.ordered", "p.name", "p.part", "cardinality(p.slots)") + `
        ) w
    ) x
), uc AS (
    UPDATE jobfence_limit_slots s SET job_id = z.id, gen = s.gen + 1, granted_at = now()
    FROM z WHERE s.ctid = ANY (ARRAY(SELECT sctid FROM z)) AND s.ctid = z.sctid
), f AS MATERIALIZED (
    SELECT nextval('jobfence_fence_seq') AS fence FROM (SELECT count(*) AS n FROM z WHERE z.claimed) c WHERE c.n > 0
), g AS (
    UPDATE jobfence_jobs j
    SET state = CASE WHEN z.claimed THEN 'running' ELSE 'available' END,
        limit_slot = z.slot, scheduled_at = now(),
        attempt = CASE WHEN z.claimed THEN j.attempt + 1 ELSE j.attempt END,
        fence = CASE WHEN z.claimed THEN (SELECT fence FROM f) ELSE j.fence END,
        lease_expires_at = CASE WHEN z.claimed THEN now() + $4::bigint * interval '1 microsecond' ELSE j.lease_expires_at END,
        attempted_at = CASE WHEN z.claimed THEN statement_timestamp() ELSE j.attempted_at END,
        attempted_by = CASE WHEN z.claimed THEN j.attempted_by[greatest(array_length(j.attempted_by, 1) - 8, 1):] || $5::text
            ELSE j.attempted_by END
    FROM z
    WHERE j.id = ANY (ARRAY(SELECT id FROM z)) AND j.id = z.id
    RETURNING j.queue, z.claimed, j.id, j.ctid, j
)
SELECT ` + jobColumns + `, NULL, NULL, NULL::int, NULL::bigint, NULL::bigint[], NULL::tid[] FROM (
    SELECT j.*, row_number() OVER (ORDER BY j.id) AS inline_n, sum(` + claimRowBytes + `) OVER (ORDER BY j.id) AS inline_bytes
    FROM (SELECT (g.j).* FROM g WHERE g.claimed ORDER BY g.id LIMIT $7) j
) j
WHERE j.inline_n <= $7 AND j.inline_bytes <= $6 AND j.depends_on IS NULL
UNION ALL
SELECT ` + claimReplyNulls + `, g.queue, NULL::text, count(*)::int, NULL, NULL, NULL FROM g WHERE NOT g.claimed GROUP BY g.queue
UNION ALL
SELECT ` + claimReplyNulls + `, NULL, NULL, NULL, (SELECT fence FROM f), array_agg(g.id ORDER BY g.id), array_agg(g.ctid ORDER BY g.id)
FROM g WHERE g.claimed HAVING count(*) > 0
UNION ALL
SELECT ` + claimReplyNulls + `, p.n, p.pt, CASE WHEN l.rate IS NULL AND l.fair_by = '' THEN 0 END, NULL, NULL, NULL
FROM (SELECT DISTINCT n, pt FROM unnest($1::text[], $2::text[]) AS p(n, pt)) p
LEFT JOIN jobfence_limits l ON l.name = p.n
WHERE (p.n, p.pt) NOT IN (SELECT name, part FROM p WHERE NOT p.ordered OR EXISTS (SELECT FROM z WHERE z.name = p.name AND z.part = p.part))`

// concClaim is what a Finish asks handOverSQL to claim: up to caps[p]
// of the jobs handed the slots that its outcomes freed in partition p,
// for the worker workerID, leased for lease.
type concClaim struct {
	caps     map[partition]int
	lease    time.Duration
	workerID string
	// traces asks for the claimed workflow tasks' dependencies' traces
	// (queue.FinishClaimParams.DependencyTraces).
	traces bool
}

// queueHandOver queues handOverSQL for the partitions ps of a batch of
// outcomes whose limited jobs are ids, claiming what claim asks (nil:
// nothing): the rows of claimInlineJobs jobs at most, within
// claimInlineBytes, come in its reply before the batch commits.
func queueHandOver(b *pgx.Batch, ps []partition, ids []int64, claim *concClaim) {
	names, parts := chunkArrays(ps)
	caps := []int32{}
	var lease int64
	var worker string
	if claim != nil {
		caps = make([]int32, len(ps))
		for i, p := range ps {
			caps[i] = int32(claim.caps[p])
		}
		lease, worker = claim.lease.Microseconds(), claim.workerID
	}
	b.Queue(handOverSQL, names, parts, caps, lease, worker, claimInlineBytes, claimInlineJobs, ids)
}
