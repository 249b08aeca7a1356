package pgqueue

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// waitBoundsMs are the upper bounds, in milliseconds, of the buckets of
// the enqueue-to-start histogram that jobfence_stats_minute.wait_ms
// counts; a last bucket holds the waits beyond the last bound. They are
// part of the table's meaning: rows written with other bounds would not
// add up, so they never change (a new bound would be a new column).
var waitBoundsMs = [...]int64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000,
	60_000, 120_000, 300_000, 600_000, 1_800_000, 3_600_000}

// numWaitBuckets is the histogram's bucket count: one per bound and one
// unbounded.
const numWaitBuckets = len(waitBoundsMs) + 1

// WaitBucketBounds returns the upper bounds of the buckets of the
// enqueue-to-start histogram that the series count (jobfence_stats_minute
// .wait_ms holds one count per bound, then one for the waits beyond the
// last): from 1 ms to an hour.
func WaitBucketBounds() []time.Duration {
	out := make([]time.Duration, len(waitBoundsMs))
	for i, b := range waitBoundsMs {
		out[i] = time.Duration(b) * time.Millisecond
	}
	return out
}

// waitBucket is the bucket of a wait of d.
func waitBucket(d time.Duration) int {
	ms := d.Milliseconds()
	if d > 0 && d%time.Millisecond != 0 {
		ms++ // a wait of 1.2 ms is over the 1 ms bound
	}
	i, _ := slices.BinarySearch(waitBoundsMs[:], ms)
	return i
}

// maxSeriesMinutes bounds the minutes of counts a client keeps while it
// cannot write them (the database is unreachable): past it, the oldest
// minute's counts are dropped, so that an outage costs a gap in the
// charts and not memory.
const maxSeriesMinutes = 60

// seriesKey names a row of jobfence_stats_minute within its minute.
type seriesKey struct{ queue, kind string }

// seriesCell is what a client counted for one queue and kind in one
// minute: atomic adds, so that recording costs no lock.
type seriesCell struct {
	enqueued, completed, failed, retried, discarded atomic.Int64
	wait                                            [numWaitBuckets]atomic.Int64
}

// seriesMinute holds a minute's cells.
type seriesMinute struct {
	// minute is the Unix time of the minute's start, in minutes.
	minute int64
	cells  sync.Map // seriesKey -> *seriesCell
}

// series counts what a client's enqueues and its worker's attempts did,
// per minute, queue and kind, until a flush writes it (FlushSeries). A
// recorder loads the current minute (an atomic pointer) and its cell (a
// sync.Map read) and adds to it; only the first record of a minute takes
// the lock, to start the minute.
type series struct {
	now func() time.Time
	cur atomic.Pointer[seriesMinute]

	mu sync.Mutex
	// old are the minutes before cur that have not been drained empty
	// yet: a recorder that loaded one before it ended may still add to it.
	old []*seriesMinute

	// flushing is held by the flush in progress; again asks the
	// asynchronous flush in progress for one more (see flushAsync).
	flushing sync.Mutex
	again    atomic.Bool
}

// cell returns the cell of q and k in the current minute, and whether
// this call started the minute.
func (s *series) cell(q, k string) (*seriesCell, bool) {
	m := s.now().Unix() / 60
	cur := s.cur.Load()
	started := false
	if cur == nil || cur.minute != m {
		cur, started = s.start(m)
	}
	key := seriesKey{q, k}
	if v, ok := cur.cells.Load(key); ok {
		return v.(*seriesCell), started
	}
	v, _ := cur.cells.LoadOrStore(key, new(seriesCell))
	return v.(*seriesCell), started
}

// start makes minute m the current one, keeping the one it ends for the
// next flush.
func (s *series) start(m int64) (*seriesMinute, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.cur.Load()
	if cur != nil && cur.minute == m {
		return cur, false
	}
	if cur != nil {
		s.old = append(s.old, cur)
		if len(s.old) > maxSeriesMinutes {
			s.old = slices.Delete(s.old, 0, len(s.old)-maxSeriesMinutes)
		}
	}
	next := &seriesMinute{minute: m}
	s.cur.Store(next)
	return next, true
}

// seriesRow is one row for jobfence_stats_minute: what was drained from
// cell.
type seriesRow struct {
	minute                                          time.Time
	queue, kind                                     string
	enqueued, completed, failed, retried, discarded int64
	wait                                            [numWaitBuckets]int64
	cell                                            *seriesCell
}

// take drains every minute's cells (each counter swapped to zero, so that
// an add racing the flush lands in this one or the next) and returns the
// rows that counted something, sorted by minute, queue and kind: two
// instances' flushes then lock shared rows in one order. The minutes
// before the current one that drained empty are forgotten.
func (s *series) take() []seriesRow {
	s.mu.Lock()
	minutes := slices.Clone(s.old)
	if cur := s.cur.Load(); cur != nil {
		minutes = append(minutes, cur)
	}
	s.mu.Unlock()
	var rows []seriesRow
	var drained []*seriesMinute
	for _, m := range minutes {
		n := len(rows)
		at := time.Unix(m.minute*60, 0).UTC()
		m.cells.Range(func(k, v any) bool {
			key, c := k.(seriesKey), v.(*seriesCell)
			r := seriesRow{minute: at, queue: key.queue, kind: key.kind, cell: c,
				enqueued: c.enqueued.Swap(0), completed: c.completed.Swap(0), failed: c.failed.Swap(0),
				retried: c.retried.Swap(0), discarded: c.discarded.Swap(0)}
			some := r.enqueued|r.completed|r.failed|r.retried|r.discarded != 0
			for i := range c.wait {
				r.wait[i] = c.wait[i].Swap(0)
				some = some || r.wait[i] != 0
			}
			if some {
				rows = append(rows, r)
			}
			return true
		})
		if len(rows) == n {
			drained = append(drained, m)
		}
	}
	s.mu.Lock()
	s.old = slices.DeleteFunc(s.old, func(m *seriesMinute) bool { return slices.Contains(drained, m) })
	s.mu.Unlock()
	slices.SortFunc(rows, func(a, b seriesRow) int {
		if c := a.minute.Compare(b.minute); c != 0 {
			return c
		}
		if a.queue != b.queue {
			if a.queue < b.queue {
				return -1
			}
			return 1
		}
		switch {
		case a.kind < b.kind:
			return -1
		case a.kind > b.kind:
			return 1
		}
		return 0
	})
	return rows
}

// restore adds rows back to the cells they were drained from, after a
// flush that failed: the next flush writes them. A minute forgotten since
// (it drained empty) is kept again.
func (s *series) restore(rows []seriesRow) {
	for _, r := range rows {
		c := r.cell
		c.enqueued.Add(r.enqueued)
		c.completed.Add(r.completed)
		c.failed.Add(r.failed)
		c.retried.Add(r.retried)
		c.discarded.Add(r.discarded)
		for i, n := range r.wait {
			c.wait[i].Add(n)
		}
	}
	// The rows' minutes are still in old or current: take forgets only
	// minutes that drained empty, and these did not.
}

// countEnqueued counts the jobs of ps that were inserted (n of them): all
// of them when n is len(ps); otherwise (some were duplicates of a unique
// key, which the batch does not say) the first n. It reports whether it
// started a minute, so that a client that only inserts can write the
// minute before (see flushAsync).
func (s *series) countEnqueued(ps []queue.EnqueueParams, n int64) bool {
	started := false
	for i := range ps {
		if int64(i) >= n {
			break
		}
		q := ps[i].Queue
		if q == "" {
			q = queue.DefaultQueue
		}
		c, st := s.cell(q, ps[i].Kind)
		c.enqueued.Add(1)
		started = started || st
	}
	return started
}

// recordAttempt counts one attempt's end (see queue.SeriesRecorder) and
// reports whether it started a minute.
func (s *series) recordAttempt(job *queue.Job, o queue.Outcome, failed bool) bool {
	c, started := s.cell(job.Queue, job.Kind)
	switch o {
	case queue.OutcomeComplete:
		c.completed.Add(1)
	case queue.OutcomeRetry:
		c.retried.Add(1)
	case queue.OutcomeDiscard:
		c.discarded.Add(1)
	}
	if failed && o != 0 {
		c.failed.Add(1)
	}
	if !job.AttemptedAt.IsZero() && !job.ScheduledAt.IsZero() {
		c.wait[waitBucket(max(job.AttemptedAt.Sub(job.ScheduledAt), 0))].Add(1)
	}
	return started
}
