package dashboard

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// summaryStates are the states the overview and /metrics count per queue:
// the unfinished ones and discarded (the jobs that need a person).
// Completed and cancelled jobs are not counted: they are most of a busy
// table, and counting them would read all of it.
var summaryStates = []queue.State{queue.StateAvailable, queue.StateScheduled, queue.StateRunning, queue.StateRetryable, queue.StateDiscarded}

// queueSummary is one queue's line of the overview.
type queueSummary struct {
	Name   string
	Counts map[queue.State]int64
	// Completed5m and Completed1h count jobs completed in the last five
	// minutes and the last hour.
	Completed5m, Completed1h int64
	// OldestWaiting is when the longest-waiting ready job became ready
	// (available, or scheduled or retryable and due); zero if none waits.
	OldestWaiting time.Time
	Paused        bool
	PausedAt      time.Time
}

// Count is how many of the queue's jobs are in state, for the template.
func (q queueSummary) Count(state string) int64 { return q.Counts[queue.State(state)] }

// summary is the overview's and /metrics' data, read by one statement.
type summary struct {
	// Now is the database's clock when it was read.
	Now    time.Time
	Queues []queueSummary
	// LiveWorkers counts the registered instances reporting now;
	// StaleOutcomes sums, over the registered instances, the outcomes the
	// fence refused as stale since each started.
	LiveWorkers   int64
	StaleOutcomes int64
}

// summarySQL reads the summary in one statement, one branch per state so
// that each is served by an index whose predicate that state implies:
// jobfence_jobs_available and jobfence_jobs_waiting (migration 00006) for
// available, scheduled and retryable; jobfence_jobs_running for running,
// whose predicate (attempted_at IS NOT NULL, which every claim sets) the
// branch repeats so that the planner can prove it; jobfence_jobs_discarded
// for discarded;
// the finalized index, by time, for the recent completions. None reads the
// completed jobs that make up most of the table. Each row is (queue, what,
// n, n2, at):
//
//	waiting state: count, -, the oldest due scheduled_at
//	running, discarded: count
//	completed: in the last 5 minutes, in the last hour
//	paused: -, -, paused_at
//	workers (queue ''): live instances, stale outcomes
//	now (queue ''): -, -, the database's clock
const summarySQL = `
SELECT queue, state, count(*), 0::bigint, min(scheduled_at) FILTER (WHERE scheduled_at <= now())
FROM jobfence_jobs WHERE state = 'available' OR state = 'scheduled' OR state = 'retryable'
GROUP BY queue, state
UNION ALL
SELECT queue, 'running', count(*), 0, NULL FROM jobfence_jobs
WHERE state = 'running' AND attempted_at IS NOT NULL GROUP BY queue
UNION ALL
SELECT queue, 'discarded', count(*), 0, NULL FROM jobfence_jobs WHERE state = 'discarded' GROUP BY queue
UNION ALL
SELECT queue, 'completed', count(*) FILTER (WHERE finalized_at > now() - interval '5 minutes'), count(*), NULL
FROM jobfence_jobs WHERE state = 'completed' AND finalized_at > now() - interval '1 hour' GROUP BY queue
UNION ALL
SELECT name, 'paused', 0, 0, paused_at FROM jobfence_queues WHERE paused_at IS NOT NULL
UNION ALL
SELECT '', 'workers', count(*) FILTER (WHERE last_seen_at >= now() - heartbeat_interval * $1::int), coalesce(sum(stale), 0)::bigint, NULL
FROM jobfence_workers
UNION ALL
SELECT '', 'now', 0, 0, now()`

// readSummary runs summarySQL. JIT compilation is turned off for it: the
// planner's estimate for a large table crosses jit_above_cost, and
// compiling would take longer than the query runs.
func (h *handler) readSummary(ctx context.Context) (*summary, error) {
	s := &summary{}
	byName := map[string]*queueSummary{}
	get := func(name string) *queueSummary {
		q, ok := byName[name]
		if !ok {
			q = &queueSummary{Name: name, Counts: map[queue.State]int64{}}
			byName[name] = q
		}
		return q
	}
	err := pgx.BeginTxFunc(ctx, h.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL jit = off"); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, summarySQL, pgqueue.LiveIntervals)
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
			switch what {
			case "now":
				s.Now = *at
			case "workers":
				s.LiveWorkers, s.StaleOutcomes = n, n2
			case "paused":
				q := get(name)
				q.Paused, q.PausedAt = true, *at
			case "completed":
				q := get(name)
				q.Completed5m, q.Completed1h = n, n2
			default:
				q := get(name)
				q.Counts[queue.State(what)] = n
				if at != nil && (q.OldestWaiting.IsZero() || at.Before(q.OldestWaiting)) {
					q.OldestWaiting = *at
				}
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("dashboard: overview: %w", err)
	}
	for _, q := range byName {
		s.Queues = append(s.Queues, *q)
	}
	sort.Slice(s.Queues, func(i, j int) bool { return s.Queues[i].Name < s.Queues[j].Name })
	return s, nil
}
