package pgqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// A worker that has just completed a workflow task has, most often, room
// to run the dependents its completion makes ready. Given
// FinishClaimParams.Slots, the release claims them for it in the
// statement that releases them: releaseClaimSQL in the outcomes'
// transaction, releaseRangeClaimSQL for each later range of a fan-out. A
// dependent then goes from pending to running in one row version, where a
// release and a claim wrote two (pending to available, then running) with
// the claim's round trip between them. The worker reserves the slots
// first (queue.Slots.Reserve) and gets the jobs once the release has
// committed (Fill).
//
// A dependent claimed so is claimed as claimSQL claims: running, attempt
// + 1, leased, attempted by the worker, under a fence drawn after every
// row of the release is locked. Only the release that the accepted
// completion ran can claim (a zombie's stale outcome releases nothing),
// and only what it makes ready now: not a dependent scheduled for later,
// governed by a limit (the grant decides when it runs), cancelled, or of a
// paused queue. Nor does it claim ahead of a claim's order by priority:
// a queue with an available job of a higher priority (a lower number)
// than a dependent's gets that dependent made available, as before. A
// dependent may start before an available job of its own priority that
// was ready earlier, as a job a limit grants to an outcome does.
//
// The reply's claim is a summary row, as a large claim's is: the fence and
// the jobs' IDs and row versions, 22 bytes a job, for finishClaimJobs
// jobs at most (each queue's cap is the slots reserved, which the caller
// bounds by finishClaimJobs); the jobs' rows are read after the commit
// (readClaimed), so that a frozen worker's batch still commits.

// releaseClaimStep picks (k), among the dependents that l locked, those a
// release claims: made ready by it now (no dependency left, its time
// come, not cancelled, no limit of its own or adopted), of a queue that
// parameter $p names with a cap above 0 (parameter $p+1: the slots
// reserved there), the first cap of each queue in (priority, id) order,
// of a queue that is not paused and holds no available job of a higher
// priority. It draws their fence (f) once every row of the release is
// locked: count(*) reads all of k, which reads all of l.
func releaseClaimStep(p int) string {
	return fmt.Sprintf(`, ok AS MATERIALIZED (
    SELECT x.queue, x.priority, q.cap
    FROM (SELECT DISTINCT l.queue, l.priority FROM l) x
    JOIN unnest($%d::text[], $%d::int[]) AS q(name, cap) ON q.name = x.queue AND q.cap > 0
    WHERE NOT EXISTS (SELECT FROM jobfence_queues qs WHERE qs.name = x.queue AND qs.paused_at IS NOT NULL)
      AND NOT EXISTS (
        SELECT FROM jobfence_jobs h
        WHERE h.state = 'available' AND h.queue = x.queue AND h.priority < x.priority AND h.scheduled_at <= now())
), k AS MATERIALIZED (
    SELECT c.id FROM (
        SELECT l.id, ok.cap, row_number() OVER (PARTITION BY l.queue ORDER BY l.priority, l.id) AS rn
        FROM l JOIN ok ON ok.queue = l.queue AND ok.priority = l.priority
        WHERE NOT l.cancel AND l.deps_left - l.n <= 0 AND l.scheduled_at <= now()
          AND l.own_limit IS NULL AND l.adopt_name IS NULL
    ) c
    WHERE c.rn <= c.cap
), f AS MATERIALIZED (
    SELECT nextval('jobfence_fence_seq') AS fence FROM (SELECT count(*) AS n FROM k) c WHERE c.n > 0
)`, p, p+1)
}

// releaseClaimReply is the row of a claiming release's reply that says
// what it claimed (claimReply): its fence and the jobs' IDs and row
// versions, none when it claimed nothing.
const releaseClaimReply = `
SELECT NULL, NULL, NULL, (SELECT fence FROM f), array_agg(u.id ORDER BY u.id), array_agg(u.ctid ORDER BY u.id)
FROM u WHERE u.state = 'running' HAVING count(*) > 0`

// releaseClaimSQL is releaseSQL for completions only (it cancels nothing
// but compensations that no failure runs, whose cascades it records, so
// it needs no pass of releaseLockSQL) that claims what releaseClaimStep
// picks ($3 the queues, $4 their caps) for worker $6, leased for $5
// microseconds. Its reply is releaseSQL's, with the claim's row.
//
// transition: release, release-claim
var releaseClaimSQL = releaseClosure + releaseClaimStep(3) + releaseUpdate(5) + releaseRangesRecorded + `
SELECT r.queue, NULL::bigint, NULL::text, NULL::bigint, NULL::bigint[], NULL::tid[]
FROM (SELECT DISTINCT queue FROM u WHERE u.state = 'available') r
UNION ALL
SELECT NULL, task_id, NULL, NULL, NULL, NULL FROM (SELECT DISTINCT task_id FROM rs) r
UNION ALL
SELECT NULL, task_id, 'cascade', NULL, NULL, NULL FROM cq
UNION ALL` + releaseClaimReply

// releaseRangeClaimSQL is releaseRangeSQL for the range's first $6
// entries, which claims what releaseClaimStep picks ($2 the queues, $3
// their caps) for worker $5, leased for $4 microseconds, and records the
// range's other entries as a range of their own, released next.
//
// transition: release, release-claim
var releaseRangeClaimSQL = releaseRangeHeadTo("least(r.last, r.first + $6 - 1)") + releaseLockTail + releaseClaimStep(2) + releaseUpdate(4) + releaseRangeGone + `, rest AS (
    INSERT INTO jobfence_releases (task_id, first, last)
    SELECT r.task_id, r.first + $6, r.last FROM r WHERE r.first + $6 <= r.last
    ON CONFLICT DO NOTHING
)
SELECT w.queue, NULL::bigint, NULL::text, NULL::bigint, NULL::bigint[], NULL::tid[]
FROM (SELECT DISTINCT queue FROM u WHERE u.state = 'available') w
UNION ALL
SELECT NULL, task_id, NULL, NULL, NULL, NULL FROM r
UNION ALL
SELECT NULL, task_id, 'cascade', NULL, NULL, NULL FROM cq
UNION ALL` + releaseClaimReply

// dependentsClaim is how a FinishClaim's releases claim for its worker
// (queue.FinishClaimParams.Slots): the slots its outcomes' own release
// reserved, and the queue of each completed task, whose later ranges
// reserve and claim there.
type dependentsClaim struct {
	slots    queue.Slots
	lease    time.Duration
	workerID string
	traces   bool
	// reserved are the slots reserved, by queue, for the release in the
	// outcomes' transaction; each is filled once (fill).
	reserved map[string]int
	// queues holds each completed task's queue, by ID.
	queues map[int64]string
	// until ends the ranges' claims (releaseClaimWindow).
	until time.Time
}

// reserveDependents returns how fs's releases claim for the worker p
// describes, or nil when p gives no Slots. For a batch of completions
// only (cascade false: its release is releaseClaimSQL), it reserves, in
// each completed task's queue, a slot for each dependent of a task that
// has several (up to a release's chunk each), and one for all the tasks
// that have one: a fan-in's dependencies each have the same one, and a
// batch of them makes it ready once at most. budget (what the batch's
// grants leave of finishClaimJobs) bounds the slots reserved over the
// batch, and so the claim's summary row.
func (c *Client) reserveDependents(fs []queue.Finish, p *queue.FinishClaimParams, cascade bool, budget int) *dependentsClaim {
	if p == nil || p.Slots == nil {
		return nil
	}
	d := &dependentsClaim{slots: p.Slots, lease: p.Lease, workerID: p.WorkerID, traces: p.DependencyTraces, queues: map[int64]string{}}
	want := map[string]int{}
	single := map[string]bool{}
	for _, f := range fs {
		if !f.Workflow || f.Outcome != queue.OutcomeComplete || f.Dependents == 0 || f.Queue == "" {
			continue
		}
		d.queues[f.ID] = f.Queue
		if f.Dependents == 1 {
			single[f.Queue] = true
			continue
		}
		want[f.Queue] += min(f.Dependents, c.cfg.ReleaseChunk)
	}
	if cascade {
		return d
	}
	for q := range single {
		want[q]++
	}
	left := max(budget, 0)
	for q, n := range want {
		if left == 0 {
			break
		}
		if got := d.slots.Reserve(q, min(n, left)); got > 0 {
			if d.reserved == nil {
				d.reserved = map[string]int{}
			}
			d.reserved[q] = got
			left -= got
		}
	}
	return d
}

// claimCapsArgs returns the queues and caps of reserved slots, as
// releaseClaimStep takes them.
func claimCapsArgs(reserved map[string]int) (queues []string, caps []int32) {
	for q, n := range reserved {
		queues = append(queues, q)
		caps = append(caps, int32(n))
	}
	return queues, caps
}

// fill hands dc's worker the jobs that a release claimed into the slots
// reserved (reply, from a statement sent at sent), and frees the slots
// they did not fill: once for each reservation, whatever happened, with
// no jobs when the release failed or claimed none. The rows are read
// after the commit; if the read fails, the jobs stay leased and are
// rescued when the lease expires, as a claim's are.
func (c *Client) fill(ctx context.Context, dc *dependentsClaim, reserved map[string]int, reply claimReply, sent time.Time) {
	if len(reserved) == 0 {
		return
	}
	var byQueue map[string][]*queue.Job
	if reply.fence != nil && len(reply.ids) > 0 {
		jobs, err := c.claimedJobs(ctx, reply, dc.traces)
		if err != nil {
			c.cfg.Logger.Warn("pgqueue: reading the dependents a release claimed failed; they are rescued when their lease expires",
				"jobs", len(reply.ids), "err", err)
		}
		byQueue = make(map[string][]*queue.Job, len(reserved))
		for _, j := range jobs {
			byQueue[j.Queue] = append(byQueue[j.Queue], j)
		}
	}
	for q, n := range reserved {
		dc.slots.Fill(q, n, byQueue[q], sent.Add(dc.lease))
	}
}
