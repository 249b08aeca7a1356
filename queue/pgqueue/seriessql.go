package pgqueue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// observe is queue.Observe under the client's InsertHook, counting the
// jobs inserted in the client's series.
func (c *Client) observe(ctx context.Context, ps []queue.EnqueueParams, insert func(ctx context.Context, meta map[string]string) (int64, error)) (int64, error) {
	n, err := queue.Observe(ctx, c.cfg.InsertHook, ps, insert)
	if err == nil && n > 0 && c.series != nil && c.series.countEnqueued(ps, n) {
		c.flushAsync()
	}
	return n, err
}

// RecordAttempt counts one attempt's end in the client's per-minute
// series (queue.SeriesRecorder): an atomic add or two, no round trip.
// With Config.NoSeries it does nothing.
func (c *Client) RecordAttempt(job *queue.Job, o queue.Outcome, failed bool) {
	if c.series != nil && c.series.recordAttempt(job, o, failed) {
		c.flushAsync()
	}
}

// flushTimeout bounds a flush that no caller waits for.
const flushTimeout = 10 * time.Second

// flushAsync writes the minute that just ended, and what else is counted,
// without waiting: the first record of a minute calls it, so that a
// client that only inserts (no worker flushes for it) writes its counts
// too, a minute at most after them. While a flush is in progress, the
// call asks it to flush once more when it is done (again), so that a
// minute that ended during it is written too.
func (c *Client) flushAsync() {
	s := c.series
	s.again.Store(true)
	if !s.flushing.TryLock() {
		return
	}
	go func() {
		for {
			for s.again.Swap(false) {
				ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
				err := c.writeSeries(ctx, false)
				cancel()
				if err != nil {
					c.cfg.Logger.Warn("pgqueue: writing the per-minute series failed; the next flush tries again", "err", err)
					break
				}
			}
			s.flushing.Unlock()
			// A call between the last Swap and the Unlock found the lock
			// held: take it back for its flush.
			if !s.again.Load() || !s.flushing.TryLock() {
				return
			}
		}
	}()
}

// FlushSeries writes what the client counted since its last flush (the
// jobs it inserted, and the attempts its worker recorded), one statement
// adding this client's counts to each minute's rows of
// jobfence_stats_minute, and in the same statement samples each queue's
// depth (available, scheduled and retryable, limited jobs) for the
// current minute into jobfence_depth_minute, unless an instance of the
// fleet did already: the first to write a minute's sample wins, and the
// others count nothing. Every worker calls it once a minute
// (queue.SeriesRecorder). A failed flush keeps the counts for the next.
// With Config.NoSeries it does nothing.
func (c *Client) FlushSeries(ctx context.Context) error {
	if c.series == nil {
		return nil
	}
	c.series.flushing.Lock()
	defer c.series.flushing.Unlock()
	return c.writeSeries(ctx, true)
}

// flushSeriesSQL adds the rows of $1..$9 to jobfence_stats_minute (one
// row per minute, queue and kind; $9 holds each row's wait histogram, one
// after the other, {n} counts each) and, when $10 is set, samples the
// depth of every queue that has waiting jobs for the current minute. The
// depth is counted from one branch per state, each served by the partial
// index its state implies (as /metrics counts them), and only when no
// instance sampled this minute: the sample is exact and costs a count of
// the waiting jobs, once a minute for the fleet (two instances that
// sample at once both count; one row wins).
const flushSeriesSQL = `
WITH counts AS (
    INSERT INTO jobfence_stats_minute AS s (minute, queue, kind, enqueued, completed, failed, retried, discarded, wait_ms)
    SELECT r.minute, r.queue, r.kind, r.enqueued, r.completed, r.failed, r.retried, r.discarded,
           ($9::bigint[])[(r.i::int - 1) * {n} + 1 : r.i::int * {n}]
    FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[])
         WITH ORDINALITY AS r(minute, queue, kind, enqueued, completed, failed, retried, discarded, i)
    ORDER BY r.minute, r.queue, r.kind
    ON CONFLICT (minute, queue, kind) DO UPDATE SET
        enqueued = s.enqueued + excluded.enqueued,
        completed = s.completed + excluded.completed,
        failed = s.failed + excluded.failed,
        retried = s.retried + excluded.retried,
        discarded = s.discarded + excluded.discarded,
        wait_ms = ARRAY(SELECT coalesce(w.a, 0) + coalesce(w.b, 0)
                        FROM unnest(s.wait_ms, excluded.wait_ms) WITH ORDINALITY AS w(a, b, i) ORDER BY w.i)
    RETURNING 1
), depth AS (
    INSERT INTO jobfence_depth_minute (minute, queue, available, scheduled, limited)
    SELECT date_trunc('minute', now()), d.queue, sum(d.available), sum(d.scheduled), sum(d.limited)
    FROM (
        SELECT queue, count(*) AS available, 0 AS scheduled, 0 AS limited FROM jobfence_jobs
        WHERE state = 'available' GROUP BY queue
        UNION ALL
        SELECT queue, 0, count(*), 0 FROM jobfence_jobs WHERE state = 'scheduled' GROUP BY queue
        UNION ALL
        SELECT queue, 0, count(*), 0 FROM jobfence_jobs WHERE state = 'retryable' GROUP BY queue
        UNION ALL
        SELECT queue, 0, 0, count(*) FROM jobfence_jobs WHERE state = 'limited' GROUP BY queue
    ) d
    WHERE $10 AND NOT EXISTS (SELECT FROM jobfence_depth_minute WHERE minute = date_trunc('minute', now()))
    GROUP BY d.queue
    ON CONFLICT DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM counts), (SELECT count(*) FROM depth)`

// writeSeries takes the client's counts and writes them, with the depth
// sample when sample is set; on failure the counts go back for the next
// flush. The caller holds series.flushing.
func (c *Client) writeSeries(ctx context.Context, sample bool) error {
	rows := c.series.take()
	if len(rows) == 0 && !sample {
		return nil
	}
	var (
		minutes                                         = make([]time.Time, len(rows))
		queues, kinds                                   = make([]string, len(rows)), make([]string, len(rows))
		enqueued, completed, failed, retried, discarded = make([]int64, len(rows)), make([]int64, len(rows)),
			make([]int64, len(rows)), make([]int64, len(rows)), make([]int64, len(rows))
		waits = make([]int64, 0, len(rows)*numWaitBuckets)
	)
	for i, r := range rows {
		minutes[i], queues[i], kinds[i] = r.minute, r.queue, r.kind
		enqueued[i], completed[i], failed[i], retried[i], discarded[i] = r.enqueued, r.completed, r.failed, r.retried, r.discarded
		waits = append(waits, r.wait[:]...)
	}
	sql := strings.ReplaceAll(flushSeriesSQL, "{n}", strconv.Itoa(numWaitBuckets))
	var nCounts, nDepth int64
	if err := c.pool.QueryRow(ctx, sql, minutes, queues, kinds, enqueued, completed, failed, retried, discarded, waits, sample).
		Scan(&nCounts, &nDepth); err != nil {
		c.series.restore(rows)
		return fmt.Errorf("pgqueue: flush series: %w", err)
	}
	return nil
}

// pruneSeriesSQL deletes the minutes older than $1 from both series
// tables; both are keyed by minute first, so it reads only what it
// deletes: a prune interval's minutes, once the first prune is done.
const pruneSeriesSQL = `
WITH s AS (DELETE FROM jobfence_stats_minute WHERE minute < now() - $1::interval RETURNING 1),
     d AS (DELETE FROM jobfence_depth_minute WHERE minute < now() - $1::interval RETURNING 1)
SELECT (SELECT count(*) FROM s) + (SELECT count(*) FROM d)`

// PruneSeries deletes the series' minutes (jobfence_stats_minute and
// jobfence_depth_minute) older than retention, on the database's clock,
// and returns how many rows it deleted (queue.SeriesRecorder). Workers
// call it at each prune with their longest retention
// (worker.Config.RetentionByState). A retention that is not positive is
// an error.
func (c *Client) PruneSeries(ctx context.Context, retention time.Duration) (int, error) {
	if retention <= 0 {
		return 0, fmt.Errorf("pgqueue: prune series: retention %v is not positive", retention)
	}
	var n int
	if err := c.pool.QueryRow(ctx, pruneSeriesSQL, retention).Scan(&n); err != nil {
		return 0, fmt.Errorf("pgqueue: prune series: %w", err)
	}
	return n, nil
}

// ErrSeriesParams is wrapped by the error Series returns for parameters
// it cannot read: a span or step out of range.
var ErrSeriesParams = errors.New("pgqueue: bad series parameters")

// MaxSeriesSpan is the longest span Series reads; MaxSeriesPoints the
// most points it returns.
const (
	MaxSeriesSpan   = 31 * 24 * time.Hour
	MaxSeriesPoints = 2000
)

// SeriesParams selects the per-minute series that Series reads.
type SeriesParams struct {
	// Span is how far back from now the series go: required, at most
	// MaxSeriesSpan.
	Span time.Duration
	// Step is the time each point sums: a whole number of minutes, such
	// that Span / Step is at most MaxSeriesPoints. Zero means one minute.
	Step time.Duration
	// Queue and Kind keep the counts of one queue or one kind; empty
	// means all. The queue depth is per queue: Kind does not narrow it.
	Queue, Kind string
}

// SeriesPoint is what the fleet counted in one step.
type SeriesPoint struct {
	// At is the step's start.
	At time.Time
	// Enqueued counts the jobs inserted; Completed, Retried and Discarded
	// the attempts that ended so; Failed the attempts whose handler
	// failed (retried, or discarded with an error).
	Enqueued, Completed, Failed, Retried, Discarded int64
	// Available, Scheduled (scheduled and retryable) and Limited are the
	// largest depth sampled in the step; Sampled reports that a sample
	// was taken in it (the fleet's workers sample once a minute).
	Available, Scheduled, Limited int64
	Sampled                       bool
	// Started counts the attempts whose enqueue-to-start wait was
	// measured, and WaitP50 and WaitP99 are its median and 99th
	// percentile, interpolated within the histogram's buckets
	// (WaitBucketBounds); zero when none started.
	Started          int64
	WaitP50, WaitP99 time.Duration
}

// Series is a span of per-minute series, one point per step.
type Series struct {
	// From is the first point's start, To the end of the last point.
	From, To time.Time
	Step     time.Duration
	Points   []SeriesPoint
	// Queues and Kinds are those with counts in the span, sorted: what a
	// filter can choose from.
	Queues, Kinds []string
}

// readSeriesSQL sums the rows of the span ($1 on, steps of $2 seconds)
// per step, for the queue $3 and the kind $4 (empty for all): the counts
// ('s'), the wait histograms bucket by bucket ('w'), the depth samples
// ('d': per minute summed over the queues, then the step's largest), and
// the queues and kinds that counted ('q', 'k').
const readSeriesSQL = `
WITH s AS (
    SELECT to_timestamp(floor(extract(epoch FROM minute)::float8 / $2::float8) * $2::float8) AS t, *
    FROM jobfence_stats_minute
    WHERE minute >= $1 AND ($3 = '' OR queue = $3) AND ($4 = '' OR kind = $4)
)
SELECT 's', t, sum(enqueued)::bigint, sum(completed)::bigint, sum(failed)::bigint, sum(retried)::bigint, sum(discarded)::bigint,
       NULL::bigint[], NULL::text
FROM s GROUP BY t
UNION ALL
SELECT 'w', t, 0, 0, 0, 0, 0, array_agg(n ORDER BY i), NULL
FROM (SELECT s.t, u.i, sum(u.c)::bigint AS n FROM s, unnest(s.wait_ms) WITH ORDINALITY AS u(c, i) GROUP BY s.t, u.i) w
GROUP BY t
UNION ALL
SELECT 'd', to_timestamp(floor(extract(epoch FROM minute)::float8 / $2::float8) * $2::float8),
       max(available)::bigint, max(scheduled)::bigint, max(limited)::bigint, 0, 0, NULL, NULL
FROM (SELECT minute, sum(available) AS available, sum(scheduled) AS scheduled, sum(limited) AS limited
      FROM jobfence_depth_minute WHERE minute >= $1 AND ($3 = '' OR queue = $3) GROUP BY minute) d
GROUP BY 2
UNION ALL
SELECT DISTINCT 'q', NULL::timestamptz, 0, 0, 0, 0, 0, NULL::bigint[], queue FROM jobfence_stats_minute WHERE minute >= $1
UNION ALL
SELECT DISTINCT 'k', NULL::timestamptz, 0, 0, 0, 0, 0, NULL::bigint[], kind FROM jobfence_stats_minute
WHERE minute >= $1 AND ($3 = '' OR queue = $3)`

// Series reads the fleet's per-minute series over p.Span back from now,
// one point per p.Step (every step has its point, zero where nothing was
// counted), for one queue or kind or all. Parameters it cannot read are
// an error wrapping ErrSeriesParams that says why.
func (c *Client) Series(ctx context.Context, p SeriesParams) (Series, error) {
	if p.Step == 0 {
		p.Step = time.Minute
	}
	switch {
	case p.Span <= 0 || p.Span > MaxSeriesSpan:
		return Series{}, fmt.Errorf("%w: span %v is not between a minute and %v", ErrSeriesParams, p.Span, MaxSeriesSpan)
	case p.Step < time.Minute || p.Step%time.Minute != 0:
		return Series{}, fmt.Errorf("%w: step %v is not a whole number of minutes", ErrSeriesParams, p.Step)
	case p.Span/p.Step > MaxSeriesPoints:
		return Series{}, fmt.Errorf("%w: span %v in steps of %v makes more than %d points", ErrSeriesParams, p.Span, p.Step, MaxSeriesPoints)
	}
	// Points start at multiples of the step since the Unix epoch, as the
	// statement's steps do; the last one holds now.
	step := int64(p.Step / time.Second)
	n := int((p.Span + p.Step - 1) / p.Step)
	to := time.Unix((time.Now().Unix()/step+1)*step, 0)
	from := to.Add(-time.Duration(n) * p.Step)
	out := Series{From: from.UTC(), To: to.UTC(), Step: p.Step}
	out.Points = make([]SeriesPoint, n)
	for i := range out.Points {
		out.Points[i].At = out.From.Add(time.Duration(i) * p.Step)
	}
	waits := make([][]int64, n)
	rows, err := c.pool.Query(ctx, readSeriesSQL, out.From, p.Step.Seconds(), p.Queue, p.Kind)
	if err != nil {
		return Series{}, fmt.Errorf("pgqueue: series: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var what string
		var t *time.Time
		var a, b, cc, d, e int64
		var w []int64
		var name *string
		if err := rows.Scan(&what, &t, &a, &b, &cc, &d, &e, &w, &name); err != nil {
			return Series{}, fmt.Errorf("pgqueue: series: %w", err)
		}
		switch what {
		case "q":
			out.Queues = append(out.Queues, *name)
			continue
		case "k":
			out.Kinds = append(out.Kinds, *name)
			continue
		}
		i := int(t.Sub(out.From) / p.Step)
		if t.Before(out.From) || i >= n {
			continue // a host clock ahead of this one's wrote it
		}
		pt := &out.Points[i]
		switch what {
		case "s":
			pt.Enqueued, pt.Completed, pt.Failed, pt.Retried, pt.Discarded = a, b, cc, d, e
		case "w":
			waits[i] = w
		case "d":
			pt.Available, pt.Scheduled, pt.Limited, pt.Sampled = a, b, cc, true
		}
	}
	if err := rows.Err(); err != nil {
		return Series{}, fmt.Errorf("pgqueue: series: %w", err)
	}
	for i, w := range waits {
		pt := &out.Points[i]
		for _, k := range w {
			pt.Started += k
		}
		pt.WaitP50, pt.WaitP99 = waitQuantile(w, 0.5), waitQuantile(w, 0.99)
	}
	slices.Sort(out.Queues)
	slices.Sort(out.Kinds)
	return out, nil
}

// waitQuantile is the q-quantile of the histogram counts (one per bucket
// of waitBoundsMs, then one beyond), interpolated linearly within the
// bucket it falls in, as Prometheus' histogram_quantile does; a quantile
// in the last, unbounded bucket is its lower bound. Zero for no counts.
func waitQuantile(counts []int64, q float64) time.Duration {
	var total int64
	for _, c := range counts {
		total += c
	}
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	var seen int64
	for i, c := range counts {
		if c == 0 || float64(seen+c) < rank {
			seen += c
			continue
		}
		lower := int64(0)
		if i > 0 {
			lower = waitBoundsMs[min(i, len(waitBoundsMs))-1]
		}
		if i >= len(waitBoundsMs) {
			return time.Duration(lower) * time.Millisecond
		}
		upper := waitBoundsMs[i]
		ms := float64(lower) + float64(upper-lower)*(rank-float64(seen))/float64(c)
		return time.Duration(ms * float64(time.Millisecond)).Round(time.Microsecond)
	}
	return time.Duration(waitBoundsMs[len(waitBoundsMs)-1]) * time.Millisecond
}
