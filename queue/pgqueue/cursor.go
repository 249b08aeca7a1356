package pgqueue

import (
	"sync"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// A claim reads the available-jobs index from its start. The entries of
// jobs claimed since the last VACUUM are still there, dead, at that start:
// a claim at the head of a large backlog walks every page of them before
// it finds a job it can take (4,000 index pages per claim halfway through
// a 1M-job burn-down, so a drain costs time quadratic in its size). A
// claimCursor remembers the highest (priority, scheduled_at, id) this
// client claimed from a queue, and most claims start after it.
//
// Starting after the cursor passes over jobs that sort before it and are
// available: a claim rolled back, a put-back, a job enqueued with a higher
// priority or an earlier time than the backlog's head. They are not lost:
// every cursorFullEvery-th claim, any claim cursorFullInterval after the
// last full one, and the claim after one that came back short read from
// the start again. Such a job waits at most that long for its turn; the
// claims' order is otherwise the same. Which jobs a claim takes never
// decides safety: fences do.
//
// The interval is at least cursorFullClaims times as long as the last
// claim took: in a fleet of 20 instances on one server a claim of 1,000
// jobs took 250 ms and more, so every claim came after the interval and
// read from the start, through every entry of the jobs claimed since the
// last VACUUM (27,000 pages a claim).
const (
	cursorFullEvery    = 16
	cursorFullInterval = 250 * time.Millisecond
	cursorFullClaims   = 4
)

// claimKey is a job's position in the claim order.
type claimKey struct {
	priority    int16
	scheduledAt time.Time
	id          int64
}

func (k claimKey) after(o claimKey) bool {
	if k.priority != o.priority {
		return k.priority > o.priority
	}
	if !k.scheduledAt.Equal(o.scheduledAt) {
		return k.scheduledAt.After(o.scheduledAt)
	}
	return k.id > o.id
}

// claimCursor is one queue's cursor.
type claimCursor struct {
	mu sync.Mutex
	// valid says key may be claimed after: the last claims came back full.
	valid bool
	key   claimKey
	// since counts claims started after the cursor since the last full
	// claim, which began at fullAt.
	since  int
	fullAt time.Time
	// took is how long the last claim took.
	took time.Duration
}

// start reports whether the next claim may start after the cursor, and
// from where.
func (c *claimCursor) start(now time.Time) (after bool, from claimKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	interval := max(cursorFullInterval, cursorFullClaims*c.took)
	if !c.valid || c.since >= cursorFullEvery || now.Sub(c.fullAt) >= interval {
		// A full claim; from now on the interval counts from it.
		c.since, c.fullAt = 0, now
		return false, claimKey{}
	}
	c.since++
	return true, c.key
}

// claimed moves the cursor past the jobs a claim returned, which took
// took. A claim that came back short found the queue's end, or skipped
// rows others hold: the next one reads from the start.
func (c *claimCursor) claimed(jobs []*queue.Job, limit int, took time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.took = took
	if len(jobs) < limit {
		c.valid = false
		return
	}
	for _, j := range jobs {
		k := claimKey{priority: int16(j.Priority), scheduledAt: j.ScheduledAt, id: j.ID}
		if !c.valid || k.after(c.key) {
			c.key, c.valid = k, true
		}
	}
}

// cursors holds a client's cursors by queue. The zero value is ready.
type cursors struct {
	mu sync.Mutex
	m  map[string]*claimCursor
}

func (cs *cursors) get(q string) *claimCursor {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	c := cs.m[q]
	if c == nil {
		if cs.m == nil {
			cs.m = make(map[string]*claimCursor)
		}
		c = &claimCursor{}
		cs.m[q] = c
	}
	return c
}
