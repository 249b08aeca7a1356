package queue

import (
	"context"
	"time"
)

// Retention is how long final jobs are kept, by state, before they are
// pruned: completed jobs for Completed, cancelled ones for Cancelled,
// discarded ones for Discarded (worker.Config.RetentionByState). A zero
// field takes the one retention it was given with (WithDefault): keeping
// discarded jobs a month for a post-mortem while completed ones go after a
// day is Retention{Discarded: 30 * 24 * time.Hour} over a day.
type Retention struct {
	Completed, Cancelled, Discarded time.Duration
}

// WithDefault returns r with each zero or negative field set to d.
func (r Retention) WithDefault(d time.Duration) Retention {
	for _, f := range []*time.Duration{&r.Completed, &r.Cancelled, &r.Discarded} {
		if *f <= 0 {
			*f = d
		}
	}
	return r
}

// Shortest is the least of r's fields: how long every final job is kept
// at least.
func (r Retention) Shortest() time.Duration { return min(r.Completed, r.Cancelled, r.Discarded) }

// Longest is the greatest of r's fields.
func (r Retention) Longest() time.Duration { return max(r.Completed, r.Cancelled, r.Discarded) }

// StatePruner is a Maintainer that keeps final jobs for a retention of
// their state (pgqueue). A worker whose backend lacks it prunes with
// Maintainer.Prune and the longest of its retentions, keeping the other
// states longer than asked rather than delete any early.
type StatePruner interface {
	// PruneStates deletes up to limit final jobs finalized more than
	// their state's retention ago, and returns how many it deleted.
	PruneStates(ctx context.Context, r Retention, limit int) (int, error)
}
