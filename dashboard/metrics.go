package dashboard

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/internal/txbound"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// metricStates are the states /metrics counts per queue: the unfinished
// ones and discarded (the jobs that need a person). Completed and
// cancelled jobs are counted for the last hour only: they are most of a
// busy table, and counting them all would read all of it.
var metricStates = []queue.State{queue.StateAvailable, queue.StateScheduled, queue.StateLimited, queue.StateRunning, queue.StateRetryable, queue.StateDiscarded}

// queueMetrics is one queue's exact series.
type queueMetrics struct {
	Name   string
	Counts map[queue.State]int64
	// Completed5m and Completed1h count jobs completed in the last five
	// minutes and the last hour.
	Completed5m, Completed1h int64
	// OldestWaiting is when the longest-waiting ready job became ready;
	// zero if none waits.
	OldestWaiting time.Time
	Paused        bool
	// UnknownKind counts the scheduled jobs waiting out the delay of a
	// put-back for an unknown kind (pgqueue.UnknownKindCondition).
	UnknownKind int64
}

// metricsSQL is the statement that counts exactly, unlike the overview:
// a gauge that stopped at a cap would hide the size of a backlog from
// alerts, and a scrape every 15 to 60 s can afford what a person
// reloading a page cannot (see docs/benchmarks/dashboard.md for its cost at a
// million jobs). It still reads no completed job older than an hour: one branch
// per state, each served by an index whose predicate that state implies,
// before and after migration 6 (the running branch names both
// lease_expires_at, for the lease index before, and attempted_at, for the
// running index after). Each row is (queue, what, n, n2, at):
//
//	waiting state: count, put back for an unknown kind, the oldest due scheduled_at
//	running, discarded, limited (held back by a limit, served by
//	jobfence_jobs_limited): count
//	completed: in the last 5 minutes, in the last hour
//	paused: -, -, paused_at
//
// The put-backs for an unknown kind are counted among the scheduled jobs
// only, where such a job waits between put-backs: the state is compared
// first, so a backlog's available rows cost no look at their errors.
func metricsSQL() string {
	return `
SELECT queue, state, count(*),
    count(*) FILTER (WHERE state = 'scheduled' AND ` + pgqueue.UnknownKindCondition() + `),
    min(scheduled_at) FILTER (WHERE scheduled_at <= now())
FROM jobfence_jobs WHERE state = 'available' OR state = 'scheduled' OR state = 'retryable'
GROUP BY queue, state
UNION ALL
SELECT queue, 'running', count(*), 0, NULL FROM jobfence_jobs
WHERE state = 'running' AND lease_expires_at IS NOT NULL AND attempted_at IS NOT NULL GROUP BY queue
UNION ALL
SELECT queue, 'discarded', count(*), 0, NULL FROM jobfence_jobs WHERE state = 'discarded' GROUP BY queue
UNION ALL
SELECT queue, 'limited', count(*), 0, NULL FROM jobfence_jobs WHERE state = 'limited' GROUP BY queue
UNION ALL
SELECT queue, 'completed', count(*) FILTER (WHERE finalized_at > now() - interval '5 minutes'), count(*), NULL
FROM (SELECT queue, finalized_at FROM jobfence_jobs WHERE state = 'completed' AND finalized_at > now() - interval '1 hour'
      UNION ALL
      SELECT queue, finalized_at FROM jobfence_jobs_finished WHERE finalized_at > now() - interval '1 hour') c
GROUP BY queue
UNION ALL
SELECT name, 'paused', 0, 0, paused_at FROM jobfence_queues WHERE paused_at IS NOT NULL`
}

// metricsBegin begins readMetrics' transaction, read-only, with JIT
// compilation turned off (the planner's estimate for a large table crosses
// jit_above_cost, and compiling would take longer than the query runs),
// and bounded (txbound): a scraper frozen in it would otherwise hold its
// snapshot, which keeps vacuum from removing the jobs' dead row versions,
// and its locks, which a migration's DDL waits for, for as long as it
// stayed frozen. One round trip.
var metricsBegin = "BEGIN READ ONLY; " + txbound.Bounds(txbound.Idle, txbound.LockWait) + "; SET LOCAL jit = off"

// readMetrics runs metricsSQL in a transaction begun by metricsBegin.
func (h *handler) readMetrics(ctx context.Context) ([]queueMetrics, error) {
	byName := map[string]*queueMetrics{}
	get := func(name string) *queueMetrics {
		q, ok := byName[name]
		if !ok {
			q = &queueMetrics{Name: name, Counts: map[queue.State]int64{}}
			byName[name] = q
		}
		return q
	}
	err := pgx.BeginTxFunc(ctx, h.pool, pgx.TxOptions{BeginQuery: metricsBegin}, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, metricsSQL())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				name, what string
				n, n2      int64
				at         *time.Time
			)
			if err := rows.Scan(&name, &what, &n, &n2, &at); err != nil {
				return err
			}
			q := get(name)
			switch what {
			case "paused":
				q.Paused = true
			case "completed":
				q.Completed5m, q.Completed1h = n, n2
			default:
				q.Counts[queue.State(what)] = n
				q.UnknownKind += n2
				if at != nil && (q.OldestWaiting.IsZero() || at.Before(q.OldestWaiting)) {
					q.OldestWaiting = *at
				}
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("dashboard: metrics: %w", err)
	}
	out := make([]queueMetrics, 0, len(byName))
	for _, q := range byName {
		out = append(out, *q)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// metrics serves /metrics: exact fleet-wide series read from the
// database, two statements per scrape. The per-process series (handler
// time, claims) come from package telemetry.
func (h *handler) metrics(w http.ResponseWriter, r *http.Request) {
	qs, err := h.readMetrics(r.Context())
	var f fleet
	if err == nil {
		f, err = h.readFleet(r.Context())
	}
	if err != nil {
		h.log.Error("dashboard: metrics", "error", err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	writeMetrics(w, qs, f)
}

// writeMetrics writes qs and f in Prometheus' text format.
func writeMetrics(w io.Writer, qs []queueMetrics, f fleet) {
	family := func(name, typ, help string) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	family("jobfence_queue_jobs", "gauge", "Jobs per queue and state (completed and cancelled jobs are not counted: see jobfence_queue_completed).")
	for _, q := range qs {
		for _, st := range metricStates {
			fmt.Fprintf(w, "jobfence_queue_jobs{queue=\"%s\",state=\"%s\"} %d\n", labelValue(q.Name), st, q.Counts[st])
		}
	}
	family("jobfence_queue_completed", "gauge", "Jobs per queue completed in the last window (5m or 1h).")
	for _, q := range qs {
		fmt.Fprintf(w, "jobfence_queue_completed{queue=\"%s\",window=\"5m\"} %d\n", labelValue(q.Name), q.Completed5m)
		fmt.Fprintf(w, "jobfence_queue_completed{queue=\"%s\",window=\"1h\"} %d\n", labelValue(q.Name), q.Completed1h)
	}
	family("jobfence_queue_oldest_waiting_age_seconds", "gauge", "Age of the queue's longest-waiting ready job; 0 when none waits.")
	for _, q := range qs {
		age := 0.0
		if !q.OldestWaiting.IsZero() {
			age = max(f.Now.Sub(q.OldestWaiting).Seconds(), 0)
		}
		fmt.Fprintf(w, "jobfence_queue_oldest_waiting_age_seconds{queue=\"%s\"} %g\n", labelValue(q.Name), age)
	}
	family("jobfence_queue_unknown_kind_jobs", "gauge", "Scheduled jobs waiting out a put-back by a worker that had no handler for their kind: during a rolling deploy, until an instance that knows the kind runs them; otherwise a kind no worker handles.")
	for _, q := range qs {
		fmt.Fprintf(w, "jobfence_queue_unknown_kind_jobs{queue=\"%s\"} %d\n", labelValue(q.Name), q.UnknownKind)
	}
	family("jobfence_queue_paused", "gauge", "1 when the queue is paused fleet-wide.")
	for _, q := range qs {
		paused := 0
		if q.Paused {
			paused = 1
		}
		fmt.Fprintf(w, "jobfence_queue_paused{queue=\"%s\"} %d\n", labelValue(q.Name), paused)
	}
	family("jobfence_workers_live", "gauge", "Worker instances reporting to the registry now.")
	fmt.Fprintf(w, "jobfence_workers_live %d\n", f.LiveWorkers)
	family("jobfence_workers_stale_outcomes", "gauge", "Outcomes refused as stale by the fence, summed over the registered worker instances since each started.")
	fmt.Fprintf(w, "jobfence_workers_stale_outcomes %d\n", f.StaleOutcomes)
}

// labelValue escapes a label value for the text format: a queue name is
// user data and may hold a quote, a backslash or a newline.
func labelValue(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}
