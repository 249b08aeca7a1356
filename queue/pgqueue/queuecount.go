package pgqueue

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/internal/txbound"
	"github.com/jobfence/jobfence/queue"
)

// DefaultCountCap is the default of Config.CountCap. Counting is what
// costs, and a count that must visit the rows (the states whose indexes
// do not hold the queue) costs ten times an index-only one. At 10,000,
// Queues stays fast at a million jobs in every mix measured
// (BenchmarkQueues1M; docs/benchmarks/code.md), while a queue's usual
// backlog is still counted exactly.
const DefaultCountCap = 10_000

// Count is a number of jobs counted up to a cap (Config.CountCap), so that
// reading it costs the same for a thousand jobs as for a million.
type Count struct {
	// N is the number of jobs; when AtLeast is set, counting stopped and
	// there are at least N (N may be 0: not counted at all).
	N int64
	// AtLeast reports that N is a lower bound.
	AtLeast bool
}

// String is N with its digits grouped by thousands, and "+" after a lower
// bound ("10,000+"), or "?" for a lower bound of zero: there may be none
// or many.
func (c Count) String() string {
	if c.AtLeast && c.N == 0 {
		return "?"
	}
	digits := strconv.FormatInt(c.N, 10)
	var b strings.Builder
	for i, d := range digits {
		if i > 0 && d != '-' && digits[i-1] != '-' && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	if c.AtLeast {
		b.WriteByte('+')
	}
	return b.String()
}

// CountCap is the cap of the client's counts: Config.CountCap, or
// DefaultCountCap.
func (c *Client) CountCap() int {
	if c.cfg.CountCap > 0 {
		return c.cfg.CountCap
	}
	return DefaultCountCap
}

// oldClaimIndex is true while the schema predates migration 6: the claim's
// index jobfence_jobs_claim then holds all three waiting states without
// the state, so no index tells an available job from a scheduled one
// without visiting the row. The statement has a variant for either schema,
// and this pseudo-constant condition (a one-time filter, evaluated before
// anything is read) runs one of them.
const oldClaimIndex = `to_regclass('jobfence_jobs_claim') IS NOT NULL`

// queuesSQL reads every queue's bounded counts, oldest ready job and pause
// in one statement. {limit} is the cap plus one: a count that reaches it
// stopped early. Each branch names its states literally, so that the
// planner serves it from a partial index whose predicate the state implies
// and never reads the completed jobs that are most of a table:
//
//   - available (migration 6 on) and discarded: one index probe per queue
//     finds the queues (a loose index scan), then an index-only count per
//     queue stops at {limit} (ordered as the index is, so that the planner
//     does not prefer a sequential scan that stops early on paper); the
//     oldest ready job is one probe per priority.
//   - waiting (before migration 6): the same probes over the claim index,
//     whose first row per priority is the oldest waiting job; the counts
//     by state come from the queue's first {waitingLimit} waiting rows,
//     visited for their state (see oldIndexShare).
//   - scheduled and retryable (migration 6 on), running, and completed and
//     cancelled: their indexes do not start with the queue, so each is
//     counted from its first {limit} rows over all queues (by due time,
//     and by finalized_at, newest first, in jobfence_jobs and in
//     jobfence_jobs_finished, merged): exact when they are all of them,
//     lower bounds otherwise (each of the two finished tables gives its
//     newest {limit} first: merged whole, the planner sorted every
//     completed job kept in jobfence_jobs, as workflow tasks and unique
//     and limited jobs are). The due ones of the first set give their
//     queues' oldest ready job, and the newest finished ones the
//     completions of the last 5 minutes and hour.
//   - limited: its index (jobfence_jobs_limited) is by limit, not queue;
//     its first {limit} rows over all queues, as for running.
//   - pending: no index holds pending jobs by state, but only workflow
//     tasks are pending, and jobfence_workflow_tasks lists a workflow's
//     tasks by one probe of its key: the tasks of the newest {limit}
//     workflows, newest first (where the tasks still waiting are), up to
//     {limit} of them, are read by ID and their pending ones counted
//     (a task pruned already counts as read): exact while there are at
//     most the cap of both, lower bounds otherwise.
//   - jobfence_queues: pauses.
//
// Each row is (queue, what, n, n5m, n1h, at, at2, by1, by2):
//
//	available, discarded: count (at most {limit}), -, -, oldest ready (available)
//	waiting: a queue's first {waitingLimit} waiting rows: their number (what
//	  'waiting', with the oldest waiting job), or those in one state
//	  (what 'w:' and the state)
//	scheduled, retryable, running: count in the sample, -, -, oldest due
//	completed: count in the sample, in the last 5 minutes, in the last hour
//	cancelled: count in the sample
//	limited, pending: count in the sample (a queue without pending tasks
//	  in it has no pending row)
//	queue '' (what 'timed', 'running', 'limited', 'finished'): the
//	  sample's size; for 'finished', whether it reaches back 5 minutes and
//	  an hour (1 or 0)
//	queue '' (what 'tasks'): the number of tasks read, the number of
//	  workflows (at most {limit})
//	queue: stored concurrency (0: none), run state (0 none, 1 started,
//	  2 stopped), -, paused_at, updated_at, paused_by, updated_by
const queuesSQL = `
WITH RECURSIVE avail(queue) AS (
    (SELECT queue FROM jobfence_jobs WHERE state = 'available' AND NOT ` + oldClaimIndex + ` ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM jobfence_jobs j WHERE j.state = 'available' AND j.queue > a.queue ORDER BY j.queue LIMIT 1)
    FROM avail a WHERE a.queue IS NOT NULL
), waiting(queue) AS (
    (SELECT queue FROM jobfence_jobs WHERE state IN ('available', 'scheduled', 'retryable') AND ` + oldClaimIndex + ` ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM jobfence_jobs j WHERE j.state IN ('available', 'scheduled', 'retryable') AND j.queue > w.queue
            ORDER BY j.queue LIMIT 1)
    FROM waiting w WHERE w.queue IS NOT NULL
), discarded(queue) AS (
    (SELECT queue FROM jobfence_jobs WHERE state = 'discarded' ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM jobfence_jobs j WHERE j.state = 'discarded' AND j.queue > d.queue ORDER BY j.queue LIMIT 1)
    FROM discarded d WHERE d.queue IS NOT NULL
), priorities(p) AS (
    SELECT generate_series({minPriority}, {maxPriority})::smallint
), timed AS (
    SELECT queue, state, scheduled_at FROM jobfence_jobs
    WHERE state IN ('scheduled', 'retryable') AND NOT ` + oldClaimIndex + `
    ORDER BY scheduled_at LIMIT {limit}
), running AS (
    SELECT queue FROM jobfence_jobs
    WHERE state = 'running' AND lease_expires_at IS NOT NULL AND attempted_at IS NOT NULL LIMIT {limit}
), limited AS (
    SELECT queue FROM jobfence_jobs
    WHERE state = 'limited' ORDER BY limit_name, limit_part, id LIMIT {limit}
), workflows AS (
    SELECT id FROM jobfence_workflows ORDER BY created_at DESC, id DESC LIMIT {limit}
), tasks AS (
    SELECT j.queue, j.state FROM (
        SELECT t.job_id FROM workflows w, jobfence_workflow_tasks t WHERE t.workflow_id = w.id LIMIT {limit}) t
    LEFT JOIN jobfence_jobs j ON j.id = t.job_id
), finished AS (
    SELECT queue, state, finalized_at FROM (
        (SELECT queue, state, finalized_at FROM jobfence_jobs WHERE state IN ('completed', 'cancelled')
         ORDER BY finalized_at DESC LIMIT {limit})
        UNION ALL
        (SELECT queue, state, finalized_at FROM jobfence_jobs_finished ORDER BY finalized_at DESC LIMIT {limit})
    ) f ORDER BY finalized_at DESC LIMIT {limit}
)
SELECT a.queue, 'available',
       (SELECT count(*) FROM (SELECT 1 FROM jobfence_jobs j WHERE j.state = 'available' AND j.queue = a.queue
                              ORDER BY j.queue, j.priority, j.scheduled_at, j.id LIMIT {limit}) s),
       0::bigint, 0::bigint,
       (SELECT min(o.at) FROM priorities p, LATERAL (
            SELECT j.scheduled_at FROM jobfence_jobs j
            WHERE j.state = 'available' AND j.queue = a.queue AND j.priority = p.p AND j.scheduled_at <= now()
            ORDER BY j.scheduled_at LIMIT 1) o(at)),
       NULL::timestamptz, NULL::text, NULL::text
FROM avail a WHERE a.queue IS NOT NULL
UNION ALL
SELECT w.queue, coalesce('w:' || x.state, 'waiting'), x.n, 0, 0,
       CASE WHEN x.state IS NULL THEN (SELECT min(o.at) FROM priorities p, LATERAL (
            SELECT j.scheduled_at FROM jobfence_jobs j
            WHERE j.state IN ('available', 'scheduled', 'retryable') AND j.queue = w.queue AND j.priority = p.p
            ORDER BY j.scheduled_at LIMIT 1) o(at) WHERE o.at <= now()) END,
       NULL, NULL, NULL
FROM waiting w, LATERAL (
    SELECT s.state, count(*) AS n FROM (
        SELECT j.state FROM jobfence_jobs j
        WHERE j.state IN ('available', 'scheduled', 'retryable') AND j.queue = w.queue
        ORDER BY j.queue, j.priority, j.scheduled_at, j.id LIMIT {waitingLimit}) s
    GROUP BY ROLLUP (s.state)) x
WHERE w.queue IS NOT NULL
UNION ALL
SELECT d.queue, 'discarded',
       (SELECT count(*) FROM (SELECT 1 FROM jobfence_jobs j WHERE j.state = 'discarded' AND j.queue = d.queue
                              ORDER BY j.queue, j.id LIMIT {limit}) s),
       0, 0, NULL, NULL, NULL, NULL
FROM discarded d WHERE d.queue IS NOT NULL
UNION ALL
SELECT coalesce(queue, ''), coalesce(state, 'timed'), count(*), 0, 0, min(scheduled_at) FILTER (WHERE scheduled_at <= now()), NULL, NULL, NULL
FROM timed GROUP BY GROUPING SETS ((queue, state), ())
UNION ALL
SELECT coalesce(queue, ''), 'running', count(*), 0, 0, NULL, NULL, NULL, NULL
FROM running GROUP BY GROUPING SETS ((queue), ())
UNION ALL
SELECT coalesce(queue, ''), 'limited', count(*), 0, 0, NULL, NULL, NULL, NULL
FROM limited GROUP BY GROUPING SETS ((queue), ())
UNION ALL
SELECT coalesce(queue, ''), CASE WHEN grouping(queue) = 1 THEN 'tasks' ELSE 'pending' END,
       CASE WHEN grouping(queue) = 1 THEN count(*) ELSE count(*) FILTER (WHERE state = 'pending') END,
       CASE WHEN grouping(queue) = 1 THEN (SELECT count(*) FROM workflows) ELSE 0 END, 0, NULL, NULL, NULL, NULL
FROM tasks GROUP BY GROUPING SETS ((queue), ())
HAVING grouping(queue) = 1 OR count(*) FILTER (WHERE state = 'pending') > 0
UNION ALL
SELECT queue, state, count(*),
       count(*) FILTER (WHERE state = 'completed' AND finalized_at > now() - interval '5 minutes'),
       count(*) FILTER (WHERE state = 'completed' AND finalized_at > now() - interval '1 hour'),
       NULL, NULL, NULL, NULL
FROM finished GROUP BY queue, state
UNION ALL
SELECT '', 'finished', count(*),
       coalesce(bool_or(finalized_at <= now() - interval '5 minutes'), false)::int,
       coalesce(bool_or(finalized_at <= now() - interval '1 hour'), false)::int,
       NULL, NULL, NULL, NULL
FROM finished
UNION ALL
SELECT name, 'queue', coalesce(concurrency, 0), CASE run_state WHEN 'started' THEN 1 WHEN 'stopped' THEN 2 ELSE 0 END, 0,
       paused_at, updated_at, paused_by, updated_by FROM jobfence_queues`

// oldIndexShare is the share of the cap that each queue's waiting jobs are
// counted up to under the claim index of migrations 1 to 5. That index
// does not hold the state, so every job counted is a row visited, and a
// full cap per queue made the page slow (docs/benchmarks/code.md).
// Migration 6 replaced that index; until a database has it, its waiting
// counts are lower bounds sooner.
const oldIndexShare = 10

// waitingCap is the cap of a queue's waiting jobs under the old claim
// index.
func waitingCap(limit int) int { return max(limit/oldIndexShare, 1) }

// queuesStatement is queuesSQL for a cap. The cap is a literal, not a
// parameter, so that a cached generic plan still knows how few rows each
// branch reads.
func queuesStatement(limit int) string {
	return strings.NewReplacer(
		"{limit}", strconv.Itoa(limit+1),
		"{waitingLimit}", strconv.Itoa(waitingCap(limit)+1),
		"{minPriority}", strconv.Itoa(queue.MinPriority),
		"{maxPriority}", strconv.Itoa(queue.MaxPriority),
	).Replace(queuesSQL)
}

// queueRow is one row of queuesSQL.
type queueRow struct {
	queue, what string
	n, n5m, n1h int64
	at, at2     *time.Time
	by1, by2    *string
}

// queuesSettingsSQL sets, for queuesSQL's transaction only:
//   - no JIT compilation: the planner's estimate for a large table crosses
//     jit_above_cost, and compiling would take longer than the query runs;
//   - no parallel workers: every branch stops after a few thousand rows,
//     and starting workers for a branch that the one-time filter turns off
//     costs more than the branch;
//   - no bitmap or sequential scans, and no sorts: the bound holds only
//     while each branch reads, in order, the index whose order its ORDER
//     BY names and stops at its LIMIT, and a bitmap scan, a sequential
//     scan or another index and a sort read every matching row first. The
//     planner chose a bitmap scan and a sort for a queue's 25,000
//     available jobs, and the finalized index and a sort for its 25,000
//     discarded ones (reading 700,000 rows), when the table's statistics
//     had not caught up with its visibility map; with a million jobs in a
//     queue either would read them all.
const queuesSettingsSQL = `SELECT set_config('jit', 'off', true), set_config('max_parallel_workers_per_gather', '0', true),
       set_config('enable_bitmapscan', 'off', true), set_config('enable_seqscan', 'off', true),
       set_config('enable_sort', 'off', true)`

// queuesBegin begins Queues' transaction, read-only, bounded, with
// queuesSettingsSQL: in one round trip.
var queuesBegin = "BEGIN READ ONLY; " + txbound.Bounds(txbound.Idle, txbound.LockWait) + "; " + queuesSettingsSQL

// Queues lists, by name, every queue that has available, scheduled,
// retryable, running or discarded jobs, limited jobs or pending tasks in
// their samples (see QueueInfo.Counts), one of the CountCap jobs finished
// last, or a row in jobfence_queues (it was paused once), with bounded
// counts (see QueueInfo.Counts): it reads at most a few CountCaps of index
// entries and rows, whatever the size of the table. A queue whose only
// jobs finished before the CountCap newest is not listed.
//
// It runs queuesSQL in a read-only transaction, with queuesSettingsSQL.
// The transaction is bounded (txbound): a client frozen in it would
// otherwise hold its snapshot, which keeps vacuum from removing any row
// version that died since (completed and claimed jobs' old versions pile
// up), and its locks, which a migration's DDL waits for, for as long as
// it stayed frozen.
func (c *Client) Queues(ctx context.Context) ([]QueueInfo, error) {
	limit := c.CountCap()
	var rows []queueRow
	err := pgx.BeginTxFunc(ctx, c.pool, pgx.TxOptions{BeginQuery: queuesBegin}, func(tx pgx.Tx) error {
		rs, err := tx.Query(ctx, queuesStatement(limit))
		if err != nil {
			return err
		}
		defer rs.Close()
		for rs.Next() {
			var r queueRow
			if err := rs.Scan(&r.queue, &r.what, &r.n, &r.n5m, &r.n1h, &r.at, &r.at2, &r.by1, &r.by2); err != nil {
				return err
			}
			rows = append(rows, r)
		}
		return rs.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("pgqueue: queues: %w", err)
	}
	return assembleQueues(rows, int64(limit), int64(waitingCap(limit))), nil
}

// assembleQueues turns queuesSQL's rows into queues sorted by name. A
// count that reached limit+1 stopped at the cap; a sample over all queues
// that reached limit+1 rows (a queue's waiting sample, waiting+1) makes
// every count taken from it a lower bound, for every queue: one not in the
// sample has jobs in that state or not.
func assembleQueues(rows []queueRow, limit, waiting int64) []QueueInfo {
	byName := map[string]*QueueInfo{}
	get := func(name string) *QueueInfo {
		q, ok := byName[name]
		if !ok {
			q = &QueueInfo{Name: name, Counts: map[queue.State]Count{}}
			byName[name] = q
		}
		return q
	}
	older := func(q *QueueInfo, at *time.Time) {
		if at != nil && (q.OldestAvailable.IsZero() || at.Before(q.OldestAvailable)) {
			q.OldestAvailable = *at
		}
	}
	// capped is n counted up to limit+1 rows.
	capped := func(n int64) Count {
		if n > limit {
			return Count{N: limit, AtLeast: true}
		}
		return Count{N: n}
	}
	// Which samples over all queues were cut short, and which queues'
	// waiting samples (before migration 6).
	full := map[string]bool{}
	fullWaiting := map[string]bool{}
	var finished5m, finished1h bool
	for _, r := range rows {
		switch {
		case r.queue == "" && (r.what == "timed" || r.what == "running" || r.what == "limited"):
			full[r.what] = r.n > limit
		case r.queue == "" && r.what == "tasks":
			// The tasks of the newest CountCap workflows: complete only
			// if neither the tasks nor the workflows reached the cap.
			full["pending"] = r.n > limit || r.n5m > limit
		case r.queue == "" && r.what == "finished":
			full[r.what] = r.n > limit
			finished5m, finished1h = r.n5m == 1, r.n1h == 1
		case r.what == "waiting":
			fullWaiting[r.queue] = r.n > waiting
		}
	}
	for _, r := range rows {
		if r.queue == "" && (r.what == "timed" || r.what == "running" || r.what == "limited" || r.what == "tasks" || r.what == "finished") {
			continue
		}
		q := get(r.queue)
		switch r.what {
		case "queue":
			q.Paused = r.at != nil
			q.PausedAt, q.UpdatedAt = deref(r.at), deref(r.at2)
			q.PausedBy, q.UpdatedBy = deref(r.by1), deref(r.by2)
			q.Concurrency = int(r.n)
			q.Run = [...]queue.QueueRun{queue.RunConfigured, queue.RunStarted, queue.RunStopped}[min(max(r.n5m, 0), 2)]
		case "available", "discarded":
			if r.n > 0 {
				q.Counts[queue.State(r.what)] = capped(r.n)
			}
			older(q, r.at)
		case "waiting":
			older(q, r.at)
		case "completed":
			q.Counts[queue.StateCompleted] = Count{N: min(r.n, limit), AtLeast: full["finished"]}
			q.Completed5m = Count{N: min(r.n5m, limit), AtLeast: full["finished"] && !finished5m}
			q.Completed1h = Count{N: min(r.n1h, limit), AtLeast: full["finished"] && !finished1h}
		default:
			if st, ok := strings.CutPrefix(r.what, "w:"); ok {
				q.Counts[queue.State(st)] = Count{N: min(r.n, waiting), AtLeast: fullWaiting[r.queue]}
				continue
			}
			st := queue.State(r.what)
			switch st {
			case queue.StateScheduled, queue.StateRetryable:
				q.Counts[st] = Count{N: min(r.n, limit), AtLeast: full["timed"]}
				older(q, r.at)
			case queue.StateRunning, queue.StateLimited, queue.StatePending:
				q.Counts[st] = Count{N: min(r.n, limit), AtLeast: full[r.what]}
			case queue.StateCancelled:
				q.Counts[st] = Count{N: min(r.n, limit), AtLeast: full["finished"]}
			}
		}
	}
	// A sample cut short says nothing of the queues it did not reach: they
	// may have jobs in its states.
	unknown := func(q *QueueInfo, states ...queue.State) {
		for _, st := range states {
			if _, ok := q.Counts[st]; !ok {
				q.Counts[st] = Count{AtLeast: true}
			}
		}
	}
	for name, q := range byName {
		if full["timed"] {
			unknown(q, queue.StateScheduled, queue.StateRetryable)
		}
		if fullWaiting[name] {
			unknown(q, queue.StateAvailable, queue.StateScheduled, queue.StateRetryable)
		}
		for _, st := range []queue.State{queue.StateRunning, queue.StateLimited, queue.StatePending} {
			if full[string(st)] {
				unknown(q, st)
			}
		}
		if full["finished"] {
			unknown(q, queue.StateCompleted, queue.StateCancelled)
			if !finished5m && q.Completed5m == (Count{}) {
				q.Completed5m.AtLeast = true
			}
			if !finished1h && q.Completed1h == (Count{}) {
				q.Completed1h.AtLeast = true
			}
		}
	}
	out := make([]QueueInfo, 0, len(byName))
	for _, q := range byName {
		out = append(out, *q)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
