package pgqueue_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// statsRow is a row of jobfence_stats_minute.
type statsRow struct {
	queue, kind                                     string
	enqueued, completed, failed, retried, discarded int64
	waits                                           int64
}

// readStats reads jobfence_stats_minute, summed over the minutes, by
// queue and kind.
func readStats(t *testing.T, db *pgtest.DB) []statsRow {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `
SELECT queue, kind, sum(enqueued)::bigint, sum(completed)::bigint, sum(failed)::bigint, sum(retried)::bigint, sum(discarded)::bigint,
       coalesce(sum((SELECT sum(x) FROM unnest(wait_ms) x)), 0)::bigint
FROM jobfence_stats_minute GROUP BY queue, kind ORDER BY queue, kind`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []statsRow
	for rows.Next() {
		var r statsRow
		if err := rows.Scan(&r.queue, &r.kind, &r.enqueued, &r.completed, &r.failed, &r.retried, &r.discarded, &r.waits); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSeriesFlush: what two clients count (enqueues, and the attempts
// their worker would record) lands in jobfence_stats_minute after their
// flushes, one row per minute, queue and kind holding both clients'
// counts added up; the depth of each queue is sampled once for the
// minute, by the first flush.
func TestSeriesFlush(t *testing.T) {
	ctx := context.Background()
	a, db := newClient(t)
	b := pgqueue.New(db.Pool, pgqueue.Config{})
	for i := range 5 {
		if _, err := a.Enqueue(ctx, queue.EnqueueParams{Queue: "mail", Kind: "welcome"}); err != nil {
			t.Fatal(err)
		}
		if i < 3 {
			if _, err := b.EnqueueMany(ctx, []queue.EnqueueParams{{Queue: "mail", Kind: "welcome"}, {Queue: "bill", Kind: "charge"}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A duplicate of a unique key inserts nothing and counts nothing.
	for range 2 {
		if _, err := a.Enqueue(ctx, queue.EnqueueParams{Queue: "bill", Kind: "charge", UniqueKey: "once"}); err != nil {
			t.Fatal(err)
		}
	}
	// a's worker: 4 mail jobs completed, one failed and retried; b's: one
	// bill job failed for good, one lost (counted as started only).
	jobs := claim(t, a, "mail", 5, time.Minute)
	for i, j := range jobs {
		if i < 4 {
			a.RecordAttempt(j, queue.OutcomeComplete, false)
		} else {
			a.RecordAttempt(j, queue.OutcomeRetry, true)
		}
	}
	bill := claim(t, b, "bill", 2, time.Minute)
	b.RecordAttempt(bill[0], queue.OutcomeDiscard, true)
	b.RecordAttempt(bill[1], 0, false)
	if err := a.FlushSeries(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.FlushSeries(ctx); err != nil {
		t.Fatal(err)
	}
	// A flush with nothing counted since writes nothing more.
	if err := a.FlushSeries(ctx); err != nil {
		t.Fatal(err)
	}
	want := []statsRow{
		{queue: "bill", kind: "charge", enqueued: 4, failed: 1, discarded: 1, waits: 2},
		{queue: "mail", kind: "welcome", enqueued: 8, completed: 4, failed: 1, retried: 1, waits: 5},
	}
	if got := readStats(t, db); !slices.Equal(got, want) {
		t.Errorf("jobfence_stats_minute holds %+v, want %+v", got, want)
	}
	var minutes int
	if err := db.Pool.QueryRow(ctx, `SELECT count(DISTINCT minute) FROM jobfence_stats_minute`).Scan(&minutes); err != nil {
		t.Fatal(err)
	}
	if minutes > 2 { // the test may cross a minute
		t.Errorf("the counts are spread over %d minutes", minutes)
	}
	// Depth: mail has 3 available (8 enqueued, 5 claimed), bill 2 (4
	// enqueued, 2 claimed); each flush sampled, the first of the minute won.
	var depth []string
	rows, err := db.Pool.Query(ctx, `SELECT queue, available, scheduled, limited, count(*) OVER (PARTITION BY queue) FROM jobfence_depth_minute ORDER BY minute, queue`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var q string
		var av, sc, li, n int64
		if err := rows.Scan(&q, &av, &sc, &li, &n); err != nil {
			t.Fatal(err)
		}
		depth = append(depth, fmt.Sprintf("%s %d %d %d", q, av, sc, li))
		if n > 2 {
			t.Errorf("queue %s has %d depth samples, want one per minute", q, n)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(depth) < 2 || depth[0] != "bill 2 0 0" || depth[1] != "mail 3 0 0" {
		t.Errorf("the depth samples are %q, want bill 2 0 0 and mail 3 0 0", depth)
	}
}

// TestSeriesMinutes: counts are kept by the minute they were counted in
// (the client's clock): a flush after a minute has ended writes each
// minute's own row, and the first count of a minute writes the minute
// before without waiting for the worker's flush (a client that only
// inserts has no worker).
func TestSeriesMinutes(t *testing.T) {
	ctx := context.Background()
	c, db := newClient(t)
	start := time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)
	var now atomic.Pointer[time.Time]
	set := func(t time.Time) { now.Store(&t) }
	set(start.Add(10 * time.Second))
	pgqueue.SetSeriesClock(c, func() time.Time { return *now.Load() })
	enqueue := func(n int) {
		for range n {
			if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "tick"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	enqueue(3)
	set(start.Add(70 * time.Second))
	enqueue(2) // the first of this minute writes the minute before
	byMinute := func() map[time.Time]int64 {
		rows, err := db.Pool.Query(ctx, `SELECT minute, enqueued FROM jobfence_stats_minute`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[time.Time]int64{}
		for rows.Next() {
			var m time.Time
			var n int64
			if err := rows.Scan(&m, &n); err != nil {
				t.Fatal(err)
			}
			out[m.UTC()] = n
		}
		return out
	}
	deadline := time.Now().Add(30 * time.Second)
	for byMinute()[start] != 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the minute before was not written when the next began: %v", byMinute())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := c.FlushSeries(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[time.Time]int64{start: 3, start.Add(time.Minute): 2}
	if got := byMinute(); len(got) != 2 || got[start] != 3 || got[start.Add(time.Minute)] != 2 {
		t.Errorf("enqueued by minute: %v, want %v", got, want)
	}
}

// TestSeriesPrune: PruneSeries deletes the minutes older than the
// retention from both tables, and only those; a retention that is not
// positive is refused, saying why.
func TestSeriesPrune(t *testing.T) {
	ctx := context.Background()
	c, db := newClient(t)
	if _, err := db.Pool.Exec(ctx, `
INSERT INTO jobfence_stats_minute (minute, queue, kind, completed)
SELECT date_trunc('minute', now()) - m * interval '1 minute', 'q', 'k', 1 FROM generate_series(0, 179) m;
INSERT INTO jobfence_depth_minute (minute, queue, available, scheduled, limited)
SELECT date_trunc('minute', now()) - m * interval '1 minute', 'q', 1, 0, 0 FROM generate_series(0, 179) m`); err != nil {
		t.Fatal(err)
	}
	n, err := c.PruneSeries(ctx, 2*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// Minutes 121 to 179 ago (and minute 120 when the clock just turned).
	if n < 2*59 || n > 2*60 {
		t.Errorf("PruneSeries(2h) deleted %d rows, want 118 to 120", n)
	}
	var oldest time.Duration
	if err := db.Pool.QueryRow(ctx, `SELECT max(now() - minute) FROM (SELECT minute FROM jobfence_stats_minute UNION ALL SELECT minute FROM jobfence_depth_minute) m`).Scan(&oldest); err != nil {
		t.Fatal(err)
	}
	if oldest > 2*time.Hour {
		t.Errorf("a minute %v old is left", oldest)
	}
	if n, err := c.PruneSeries(ctx, 2*time.Hour); err != nil || n != 0 {
		t.Errorf("a second PruneSeries(2h) = %d, %v; want nothing", n, err)
	}
	if _, err := c.PruneSeries(ctx, 0); err == nil || err.Error() != "pgqueue: prune series: retention 0s is not positive" {
		t.Errorf("PruneSeries(0) = %v, want the retention refused", err)
	}
}

// TestSeriesRead: Series sums the minutes per step, for a queue, a kind
// or all, fills the steps without counts with zeros, takes the largest
// depth sample in a step, and computes the wait's quantiles from the
// summed histograms; parameters out of range are refused, saying why.
func TestSeriesRead(t *testing.T) {
	ctx := context.Background()
	c, db := newClient(t)
	// Two minutes ago: mail/welcome 10 completed with waits of 5-10 ms
	// (bucket 3), bill/charge 2 failed; one minute ago: mail 5
	// completed with waits over an hour. Depth 7 then 9 in mail.
	buckets := func(i int, n int64) []int64 {
		b := make([]int64, len(pgqueue.WaitBucketBounds())+1)
		b[i] = n
		return b
	}
	if _, err := db.Pool.Exec(ctx, `
INSERT INTO jobfence_stats_minute (minute, queue, kind, completed, failed, retried, wait_ms) VALUES
  (date_trunc('minute', now()) - interval '2 minutes', 'mail', 'welcome', 10, 0, 0, $1),
  (date_trunc('minute', now()) - interval '2 minutes', 'bill', 'charge', 0, 2, 2, '{}'),
  (date_trunc('minute', now()) - interval '1 minute', 'mail', 'welcome', 5, 0, 0, $2)`,
		buckets(3, 10), buckets(len(pgqueue.WaitBucketBounds()), 5)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `
INSERT INTO jobfence_depth_minute (minute, queue, available, scheduled, limited) VALUES
  (date_trunc('minute', now()) - interval '2 minutes', 'mail', 7, 1, 0),
  (date_trunc('minute', now()) - interval '1 minute', 'mail', 9, 0, 2)`); err != nil {
		t.Fatal(err)
	}
	s, err := c.Series(ctx, pgqueue.SeriesParams{Span: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Points) != 60 || s.Step != time.Minute || !s.To.Equal(s.From.Add(time.Hour)) {
		t.Fatalf("an hour by the minute has %d points from %v to %v, want 60 over an hour", len(s.Points), s.From, s.To)
	}
	if !slices.Equal(s.Queues, []string{"bill", "mail"}) || !slices.Equal(s.Kinds, []string{"charge", "welcome"}) {
		t.Errorf("queues %q and kinds %q, want bill, mail and charge, welcome", s.Queues, s.Kinds)
	}
	var total, failed, sampled int64
	var p50 []time.Duration
	for _, p := range s.Points {
		total += p.Completed
		failed += p.Failed
		if p.Sampled {
			sampled++
		}
		if p.Started > 0 {
			p50 = append(p50, p.WaitP50)
		}
	}
	// The test may straddle a minute: the two minutes are then the third
	// and second last points, or the second last and last.
	if total != 15 || failed != 2 || sampled != 2 || len(p50) != 2 {
		t.Errorf("the hour sums %d completed, %d failed, %d depth samples, %d minutes with waits; want 15, 2, 2, 2", total, failed, sampled, len(p50))
	}
	if len(p50) == 2 && (p50[0] != 7500*time.Microsecond || p50[1] != time.Hour) {
		t.Errorf("the medians are %v, want 7.5ms (within 5-10 ms) and 1h (beyond the last bound)", p50)
	}
	// Per queue, per kind, and in steps of 5 minutes: one point holds
	// (or two hold) both minutes, with the larger depth.
	s, err = c.Series(ctx, pgqueue.SeriesParams{Span: time.Hour, Step: 5 * time.Minute, Queue: "mail"})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Points) != 12 {
		t.Errorf("an hour in 5-minute steps has %d points, want 12", len(s.Points))
	}
	total, failed = 0, 0
	var maxAvail int64
	for _, p := range s.Points {
		total += p.Completed
		failed += p.Failed
		maxAvail = max(maxAvail, p.Available)
	}
	if total != 15 || failed != 0 || maxAvail != 9 {
		t.Errorf("mail sums %d completed, %d failed, depth up to %d; want 15, 0, 9", total, failed, maxAvail)
	}
	s, err = c.Series(ctx, pgqueue.SeriesParams{Span: time.Hour, Kind: "charge"})
	if err != nil {
		t.Fatal(err)
	}
	total, failed = 0, 0
	for _, p := range s.Points {
		total += p.Completed
		failed += p.Retried
	}
	if total != 0 || failed != 2 {
		t.Errorf("kind charge sums %d completed, %d retried; want 0, 2", total, failed)
	}
	for _, tc := range []struct {
		p    pgqueue.SeriesParams
		want string
	}{
		{pgqueue.SeriesParams{}, "pgqueue: bad series parameters: span 0s is not between a minute and 744h0m0s"},
		{pgqueue.SeriesParams{Span: time.Hour, Step: 90 * time.Second}, "pgqueue: bad series parameters: step 1m30s is not a whole number of minutes"},
		{pgqueue.SeriesParams{Span: 31 * 24 * time.Hour}, "pgqueue: bad series parameters: span 744h0m0s in steps of 1m0s makes more than 2000 points"},
	} {
		if _, err := c.Series(ctx, tc.p); !errors.Is(err, pgqueue.ErrSeriesParams) || err.Error() != tc.want {
			t.Errorf("Series(%+v) = %v, want %q", tc.p, err, tc.want)
		}
	}
}

// TestWaitQuantile: the quantiles of known histograms, interpolated
// within their bucket.
func TestWaitQuantile(t *testing.T) {
	n := len(pgqueue.WaitBucketBounds()) + 1
	h := func(kv ...int64) []int64 {
		b := make([]int64, n)
		for i := 0; i < len(kv); i += 2 {
			b[kv[i]] = kv[i+1]
		}
		return b
	}
	for _, tc := range []struct {
		counts []int64
		q      float64
		want   time.Duration
	}{
		{h(), 0.5, 0},
		{h(0, 100), 0.5, 500 * time.Microsecond},        // within 0-1 ms
		{h(0, 50, 9, 50), 0.99, 990 * time.Millisecond}, // bucket 9: 500 ms-1 s, 49/50 in
		{h(0, 99, 12, 1), 0.5, 505 * time.Microsecond},  // the median in the first bucket
		{h(int64(n-1), 4), 0.99, time.Hour},             // beyond the last bound: its lower bound
		{h(2, 1), 1, 5 * time.Millisecond},              // the maximum: the bucket's upper bound
	} {
		if got := pgqueue.WaitQuantile(tc.counts, tc.q); got != tc.want {
			t.Errorf("quantile %v of %v = %v, want %v", tc.q, tc.counts, got, tc.want)
		}
	}
}

// BenchmarkRecordAttempt measures what the series add to each attempt's
// end (queue.SeriesRecorder): from parallel goroutines, over 8 queues and
// kinds, as a worker's runners record them.
func BenchmarkRecordAttempt(b *testing.B) {
	// A pool that connects nowhere: the first record of a minute starts a
	// flush, which fails (and is logged, to nowhere) without a database.
	pool, err := pgxpool.New(context.Background(), "postgres://127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	c := pgqueue.New(pool, pgqueue.Config{Logger: slog.New(slog.DiscardHandler)})
	now := time.Now()
	var jobs []*queue.Job
	for i := range 8 {
		jobs = append(jobs, &queue.Job{Queue: fmt.Sprint("q", i%2), Kind: fmt.Sprint("k", i), ScheduledAt: now, AttemptedAt: now.Add(3 * time.Millisecond)})
	}
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			c.RecordAttempt(jobs[i%len(jobs)], queue.OutcomeComplete, false)
			i++
		}
	})
}
