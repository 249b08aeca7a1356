package scheduler

import (
	"fmt"
	"time"
)

// CatchUpPolicy says what a scheduler does with fires that were missed: fires
// more than Config.Grace in the past that no instance enqueued, because every
// instance was down, stopped, or could not reach the database, at the time.
// A fire that came due while an instance's loop was busy enqueuing other
// fires is late, not missed, and is enqueued. Every missed fire a policy
// drops is logged at Warn, with the schedule's name.
type CatchUpPolicy int

// The catch-up policies.
const (
	// CatchUpSkip drops missed fires; the schedule resumes with the next
	// fire. It is the default.
	CatchUpSkip CatchUpPolicy = iota
	// CatchUpLatest enqueues the latest missed fire inside
	// Options.CatchUpWindow, once, and drops the others.
	CatchUpLatest
	// CatchUpAll enqueues every missed fire inside Options.CatchUpWindow,
	// oldest first.
	CatchUpAll
)

func (p CatchUpPolicy) String() string {
	switch p {
	case CatchUpSkip:
		return "skip"
	case CatchUpLatest:
		return "latest"
	case CatchUpAll:
		return "all"
	}
	return fmt.Sprintf("CatchUpPolicy(%d)", int(p))
}

// ParseCatchUpPolicy returns the policy that String names: skip, latest
// or all.
func ParseCatchUpPolicy(s string) (CatchUpPolicy, error) {
	for _, p := range []CatchUpPolicy{CatchUpSkip, CatchUpLatest, CatchUpAll} {
		if s == p.String() {
			return p, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown catch-up policy %q: want skip, latest or all", ErrInvalidOptions, s)
}

// catchUp is how one schedule selects the fires to enqueue.
type catchUp struct {
	policy CatchUpPolicy
	// grace: a fire at most this old is on time and always enqueued.
	grace time.Duration
	// window: how far back CatchUpLatest and CatchUpAll look.
	window time.Duration
}

// missed describes the missed fires that due drops.
type missed struct {
	// beforeWindow is the first of the fires dropped because they are older
	// than the catch-up window: those from it up to windowEnd; zero if none.
	beforeWindow, windowEnd time.Time
	// n fires inside the window were dropped, from first to last.
	n           int
	first, last time.Time
}

func (m *missed) add(t time.Time) {
	if m.n == 0 {
		m.first = t
	}
	m.n++
	m.last = t
}

// due returns, oldest first, the fires of spec after cursor and at or before
// now that should be enqueued at now, and the missed fires it drops. It
// keeps the fires at or before busy, which came due while this instance was
// busy enqueuing other fires rather than down, however late they now are
// (a zero busy keeps none this way); those within grace of now; and the
// missed ones (older than grace) that the policy keeps.
func (c catchUp) due(spec *Spec, cursor, busy, now time.Time) ([]time.Time, missed) {
	var out []time.Time
	add := func(t time.Time) bool {
		out = append(out, t)
		return true
	}
	if busy = earlier(busy, now); busy.After(cursor) {
		spec.firesIn(cursor, busy, add)
		cursor = busy
	}
	onTime := now.Add(-c.grace)
	windowStart := later(cursor, now.Add(-c.window))
	var m missed
	if first := spec.Next(cursor); !first.IsZero() && !first.After(windowStart) && !first.After(onTime) {
		m.beforeWindow, m.windowEnd = first, earlier(windowStart, onTime)
	}
	var latest time.Time
	spec.firesIn(windowStart, onTime, func(t time.Time) bool {
		switch c.policy {
		case CatchUpAll:
			out = append(out, t)
		case CatchUpLatest:
			if !latest.IsZero() {
				m.add(latest)
			}
			latest = t
		default:
			m.add(t)
		}
		return true
	})
	if !latest.IsZero() {
		out = append(out, latest)
	}
	spec.firesIn(later(cursor, onTime), now, add)
	return out, m
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
