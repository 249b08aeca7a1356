package pgqueue

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jobfence/jobfence/queue"
)

// recordLogsSQL stores attempt $2 ($3, its number)'s log records ($4,
// a JSON array; $5 dropped) in jobfence_attempt_logs while job $1 is
// running under fence $2, and deletes the job's logs of earlier attempts
// past the $6 latest (this one included), adding how many it deleted to
// the count the job's latest logs carried (pruned). One statement, sent
// only by an attempt whose handler logged (worker.Logger), before its
// outcome. It reads the job's row without locking it: a rescue that
// commits meanwhile lets the attempt's logs in under their own fence,
// where they stay apart from the next attempt's; a stale attempt's logs
// never replace another's, since each attempt's are keyed by its fence.
// A job that leaves no record when it completes (delete_on_complete)
// stores none. Its one row says whether the job was running under the
// fence.
const recordLogsSQL = `
WITH j AS (
    SELECT coalesce(delete_on_complete, false) AS drop_it FROM jobfence_jobs
    WHERE id = $1 AND fence = $2 AND state = 'running'
), old AS (
    SELECT fence FROM jobfence_attempt_logs
    WHERE job_id = $1 AND EXISTS (SELECT FROM j WHERE NOT drop_it)
    ORDER BY fence DESC OFFSET greatest($6::int - 1, 0)
), del AS (
    DELETE FROM jobfence_attempt_logs l USING old WHERE l.job_id = $1 AND l.fence = old.fence
    RETURNING l.fence
), ins AS (
    INSERT INTO jobfence_attempt_logs (job_id, fence, attempt, records, dropped, pruned)
    SELECT $1, $2, $3, $4::jsonb, $5,
        (SELECT count(*) FROM del) + coalesce((SELECT max(pruned) FROM jobfence_attempt_logs WHERE job_id = $1), 0)
    FROM j WHERE NOT j.drop_it
)
SELECT EXISTS (SELECT FROM j)`

// logsColumn is the job's stored logs (queue.Job.Logs) as one JSON array,
// oldest attempt first, for the row of jobfence_jobs or
// jobfence_jobs_finished named j: a probe of jobfence_attempt_logs's
// primary key.
const logsColumn = `(SELECT jsonb_agg(jsonb_build_object('attempt', l.attempt, 'fence', l.fence, 'at', l.written_at,
    'records', l.records, 'dropped', l.dropped, 'pruned', l.pruned) ORDER BY l.fence)
    FROM jobfence_attempt_logs l WHERE l.job_id = j.id)`

// RecordLogs implements queue.LogRecorder: one round trip, sent only by an
// attempt whose handler logged through worker.Logger. Each record's
// message and attributes are cleaned of passwords first (the Redactor of
// the pool's and Config.ListenURL's connection strings, and any password
// in a URL or a password=... pair): they are shown on the dashboard and
// by `jobfence jobs show`.
func (c *Client) RecordLogs(ctx context.Context, l queue.Lease, logs queue.AttemptLogs, keep int) error {
	records := make([]queue.LogRecord, len(logs.Records))
	for i, r := range logs.Records {
		r.Message, r.Attrs = c.redactor.Text(r.Message), c.redactor.Text(r.Attrs)
		records[i] = r
	}
	b, err := json.Marshal(records)
	if err != nil {
		return fmt.Errorf("pgqueue: record logs of job %d: %w", l.ID, err)
	}
	var running bool
	if err := c.pool.QueryRow(ctx, recordLogsSQL, l.ID, l.Fence, logs.Attempt, jsonbOutput(b), logs.Dropped, max(keep, 1)).Scan(&running); err != nil {
		return fmt.Errorf("pgqueue: record logs of job %d: %w", l.ID, err)
	}
	if !running {
		return &queue.StaleFenceError{Lease: l}
	}
	return nil
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
