package pgqueue

import (
	"context"
	"encoding/json"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
)

// recordLogsSQL stores attempts' log records, one per element of the
// arrays: job $1[i], under fence $2[i], attempt number $3[i], records $4[i]
// (a JSON array), $5[i] dropped, in jobfence_attempt_logs, each only while
// its job is running under that fence, and deletes those jobs' logs of
// earlier attempts past the $6 latest (the new one included), adding how
// many it deleted to the count the job's latest logs carried (pruned).
// One statement for a batch of outcomes, sent by a worker before it sends
// the outcomes (queue.LogRecorder), only when some attempt of the batch
// logged. It reads the jobs' rows without locking them: a rescue that
// commits meanwhile lets an attempt's logs in under their own fence,
// where they stay apart from the next attempt's; a stale attempt's logs
// never replace another's, since each attempt's are keyed by its fence.
// A job that leaves no record when it completes (delete_on_complete)
// stores none. It returns the writes whose job was not running under
// their fence.
const recordLogsSQL = `
WITH w AS (
    SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::int[], $4::text[], $5::int[]) AS w(id, fence, attempt, records, dropped)
), j AS (
    SELECT w.*, coalesce(j.delete_on_complete, false) AS drop_it
    FROM w JOIN jobfence_jobs j ON j.id = w.id AND j.fence = w.fence AND j.state = 'running'
), old AS (
    SELECT l.job_id, l.fence, l.pruned, row_number() OVER (PARTITION BY l.job_id ORDER BY l.fence DESC) AS n
    FROM jobfence_attempt_logs l WHERE l.job_id IN (SELECT id FROM j WHERE NOT drop_it)
), del AS (
    DELETE FROM jobfence_attempt_logs l USING old
    WHERE l.job_id = old.job_id AND l.fence = old.fence AND old.n >= greatest($6::int, 1)
    RETURNING l.job_id
), ins AS (
    INSERT INTO jobfence_attempt_logs (job_id, fence, attempt, records, dropped, pruned)
    SELECT j.id, j.fence, j.attempt, j.records::jsonb, j.dropped,
        (SELECT count(*) FROM del WHERE del.job_id = j.id) + coalesce((SELECT max(o.pruned) FROM old o WHERE o.job_id = j.id), 0)
    FROM j WHERE NOT j.drop_it
)
SELECT w.id, w.fence FROM w WHERE NOT EXISTS (SELECT FROM j WHERE j.id = w.id AND j.fence = w.fence)`

// logsColumn is the job's stored logs (queue.Job.Logs) as one JSON array,
// oldest attempt first, for the row of jobfence_jobs or
// jobfence_jobs_finished named j: a probe of jobfence_attempt_logs's
// primary key.
const logsColumn = `(SELECT jsonb_agg(jsonb_build_object('attempt', l.attempt, 'fence', l.fence, 'at', l.written_at,
    'records', l.records, 'dropped', l.dropped, 'pruned', l.pruned) ORDER BY l.fence)
    FROM jobfence_attempt_logs l WHERE l.job_id = j.id)`

// RecordLogs implements queue.LogRecorder: one round trip for the
// writes of a batch of outcomes, sent only when some attempt of it logged
// through worker.Logger. Each record's message and attributes are
// cleaned of passwords first (the Redactor of the pool's and
// Config.ListenURL's connection strings, and any password in a URL or a
// password=... pair): they are shown on the dashboard and by `jobfence
// jobs show`.
func (c *Client) RecordLogs(ctx context.Context, writes []queue.LogsWrite, keep int) ([]queue.Lease, error) {
	if len(writes) == 0 {
		return nil, nil
	}
	ids, fences := make([]int64, len(writes)), make([]int64, len(writes))
	attempts, dropped := make([]int32, len(writes)), make([]int32, len(writes))
	records := make([]string, len(writes))
	for i, w := range writes {
		rs := make([]queue.LogRecord, len(w.Logs.Records))
		for k, r := range w.Logs.Records {
			r.Message, r.Attrs = c.redactor.Text(r.Message), c.redactor.Text(r.Attrs)
			rs[k] = r
		}
		b, err := json.Marshal(rs)
		if err != nil {
			return nil, fmt.Errorf("pgqueue: record logs of job %d: %w", w.Lease.ID, err)
		}
		ids[i], fences[i], records[i] = w.Lease.ID, w.Lease.Fence, string(jsonbOutput(b))
		attempts[i], dropped[i] = int32(w.Logs.Attempt), int32(min(w.Logs.Dropped, math.MaxInt32))
	}
	rows, err := c.pool.Query(ctx, recordLogsSQL, ids, fences, attempts, records, dropped, int32(min(max(keep, 1), math.MaxInt32)))
	if err != nil {
		return nil, fmt.Errorf("pgqueue: record logs of %d attempts: %w", len(writes), err)
	}
	stale, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (queue.Lease, error) {
		var l queue.Lease
		err := row.Scan(&l.ID, &l.Fence)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("pgqueue: record logs of %d attempts: %w", len(writes), err)
	}
	return stale, nil
}

// decodeLogs reads logsColumn's value; nil when the job has none.
func decodeLogs(id int64, b []byte) ([]queue.AttemptLogs, error) {
	if b == nil {
		return nil, nil
	}
	var logs []queue.AttemptLogs
	if err := json.Unmarshal(b, &logs); err != nil {
		return nil, fmt.Errorf("pgqueue: the logs of job %d: %w", id, err)
	}
	return logs, nil
}
