package pgqueue

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// The registry's clock, in heartbeat intervals of each instance (its own
// worker.Config.HeartbeatInterval, stored with its row): an instance is
// live while its last report is at most LiveIntervals old, and its row is
// deleted once it is GoneIntervals old. Between the two it is listed as
// not live: it crashed, was killed, or cannot reach the database.
const (
	LiveIntervals = 3
	GoneIntervals = 10
)

// LiveWorkerCondition is the SQL condition under which a row of
// jobfence_workers is a live instance: its last report is at most
// LiveIntervals of its own heartbeat intervals old, by the database's
// clock. Workers uses it, and so does anything else that counts live
// instances (the dashboard's overview), so that both agree.
func LiveWorkerCondition() string {
	return "last_seen_at >= now() - heartbeat_interval * " + strconv.Itoa(LiveIntervals)
}

// registerSQL upserts the instance's row and, in the same round trip,
// deletes rows of instances gone for GoneIntervals of their own interval.
// SKIP LOCKED keeps two instances that age out the same rows from waiting
// on (or deadlocking with) each other.
const registerSQL = `
WITH gone AS (
    DELETE FROM jobfence_workers WHERE id IN (
        SELECT id FROM jobfence_workers
        WHERE id <> $1 AND last_seen_at < now() - heartbeat_interval * $11::int
        FOR UPDATE SKIP LOCKED
    )
)
INSERT INTO jobfence_workers AS w (id, host, pid, queues, running, completed, stale, lost, started_at, last_seen_at, heartbeat_interval)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, now(), $10::bigint * interval '1 microsecond')
ON CONFLICT (id) DO UPDATE SET host = $2, pid = $3, queues = $4, running = $5, completed = $6, stale = $7, lost = $8,
    started_at = $9, last_seen_at = now(), heartbeat_interval = $10::bigint * interval '1 microsecond'`

// Register implements queue.Registrar: one upsert of the instance's row,
// which also deletes the rows of instances not seen for GoneIntervals.
func (c *Client) Register(ctx context.Context, inst queue.Instance) error {
	queues := slices.Sorted(slices.Values(inst.Queues))
	if queues == nil {
		queues = []string{}
	}
	_, err := c.pool.Exec(ctx, registerSQL, inst.ID, inst.Host, inst.PID, queues, inst.Running,
		inst.Completed, inst.Stale, inst.Lost, inst.StartedAt, inst.Interval.Microseconds(), GoneIntervals)
	if err != nil {
		return fmt.Errorf("pgqueue: register worker %q: %w", inst.ID, err)
	}
	return nil
}

// Deregister implements queue.Registrar: it deletes the instance's row.
func (c *Client) Deregister(ctx context.Context, id string) error {
	if _, err := c.pool.Exec(ctx, `DELETE FROM jobfence_workers WHERE id = $1`, id); err != nil {
		return fmt.Errorf("pgqueue: deregister worker %q: %w", id, err)
	}
	return nil
}

// WorkerInfo describes one registered worker instance.
type WorkerInfo struct {
	// ID is the worker's ID (worker.Config.ID); Host and PID locate it.
	ID, Host string
	PID      int
	// Queues are the queues it works, by name.
	Queues []string
	// Running is how many jobs it was running at its last report.
	Running int
	// Completed, Stale and Lost count, since StartedAt, its completions,
	// its outcomes refused as stale, and the claims it lost mid-run.
	Completed, Stale, Lost int64
	// StartedAt is when it started; LastSeenAt is its last report, by the
	// database's clock.
	StartedAt, LastSeenAt time.Time
	// HeartbeatInterval is how often it reports.
	HeartbeatInterval time.Duration
	// Live reports whether it reported within LiveIntervals of its
	// HeartbeatInterval, by the database's clock.
	Live bool
}

// workersSQL lists the registry's rows, each with whether it is live.
func workersSQL() string {
	return `
SELECT id, host, pid, queues, running, completed, stale, lost, started_at, last_seen_at,
       (extract(epoch FROM heartbeat_interval) * 1000000)::bigint,
       ` + LiveWorkerCondition() + `
FROM jobfence_workers
ORDER BY id`
}

// Workers lists the registered worker instances by ID: those that report
// now, and those that stopped reporting less than GoneIntervals ago (Live
// false).
func (c *Client) Workers(ctx context.Context) ([]WorkerInfo, error) {
	rows, err := c.pool.Query(ctx, workersSQL())
	if err != nil {
		return nil, fmt.Errorf("pgqueue: workers: %w", err)
	}
	defer rows.Close()
	var out []WorkerInfo
	for rows.Next() {
		var wi WorkerInfo
		var pid int32
		var running int32
		var intervalUS int64
		if err := rows.Scan(&wi.ID, &wi.Host, &pid, &wi.Queues, &running, &wi.Completed, &wi.Stale, &wi.Lost,
			&wi.StartedAt, &wi.LastSeenAt, &intervalUS, &wi.Live); err != nil {
			return nil, fmt.Errorf("pgqueue: workers: %w", err)
		}
		wi.PID, wi.Running = int(pid), int(running)
		wi.HeartbeatInterval = time.Duration(intervalUS) * time.Microsecond
		out = append(out, wi)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgqueue: workers: %w", err)
	}
	return out, nil
}
