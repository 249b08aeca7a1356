package scheduler

import (
	"fmt"
	"time"
)

// CatchUpPolicy says what a scheduler does with fires that were missed: fires
// more than Config.Grace in the past that no instance enqueued, because every
// instance was down, or could not reach the database, at the time.
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

// catchUp is how one schedule selects the fires to enqueue.
type catchUp struct {
	policy CatchUpPolicy
	// grace: a fire at most this old is on time and always enqueued.
	grace time.Duration
	// window: how far back CatchUpLatest and CatchUpAll look.
	window time.Duration
}

// due returns, oldest first, the fires of spec after cursor and at or before
// now that should be enqueued at now: those within grace of now, and the
// missed ones (older than grace) that the policy keeps.
func (c catchUp) due(spec *Spec, cursor, now time.Time) []time.Time {
	onTime := now.Add(-c.grace)
	var out []time.Time
	switch c.policy {
	case CatchUpLatest:
		var latest time.Time
		spec.firesIn(later(cursor, now.Add(-c.window)), onTime, func(t time.Time) bool {
			latest = t
			return true
		})
		if !latest.IsZero() {
			out = append(out, latest)
		}
	case CatchUpAll:
		spec.firesIn(later(cursor, now.Add(-c.window)), onTime, func(t time.Time) bool {
			out = append(out, t)
			return true
		})
	}
	spec.firesIn(later(cursor, onTime), now, func(t time.Time) bool {
		out = append(out, t)
		return true
	})
	return out
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
