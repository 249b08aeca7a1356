package queue

import (
	"context"
	"time"
)

// SeriesRecorder is implemented by backends that keep per-minute series of
// what their clients did, for charts over time (pgqueue: the dashboard's
// charts, docs/dashboard.md "Charts"). The counts are kept in memory and
// written once a minute per instance, so that a job's path writes nothing
// more. Every worker records each attempt's end, flushes once a minute and
// prunes with its retention; any number of instances may do so at once.
type SeriesRecorder interface {
	// RecordAttempt counts the end of one attempt of job, as its claim
	// returned it (the wait from ScheduledAt to AttemptedAt is the
	// enqueue-to-start latency). o is the outcome the backend recorded,
	// zero when none was (the job was lost, or its outcome was refused as
	// stale); failed reports that the handler failed (an OutcomeRetry, or
	// an OutcomeDiscard with an error). It is called for every job, so it
	// must be quick and safe for concurrent use.
	RecordAttempt(job *Job, o Outcome, failed bool)
	// FlushSeries writes what was counted since the last flush, and
	// samples the queues' depth for the current minute unless an
	// instance of the fleet did already.
	FlushSeries(ctx context.Context) error
	// PruneSeries deletes the minutes older than retention and returns
	// how many rows it deleted.
	PruneSeries(ctx context.Context, retention time.Duration) (int, error)
}
