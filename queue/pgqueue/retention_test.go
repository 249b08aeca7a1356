package pgqueue_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// TestPruneStates: each final state is pruned at its own retention's age,
// and not before; Prune keeps its one retention for every state.
func TestPruneStates(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	// A job of each final state finalized 90, 150 and 210 minutes ago
	// (completed in place: no finished partitions here).
	type aged struct {
		state queue.State
		age   int
	}
	ids := map[aged]int64{}
	for _, st := range []queue.State{queue.StateCompleted, queue.StateCancelled, queue.StateDiscarded} {
		for _, age := range []int{90, 150, 210} {
			res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.Pool.Exec(ctx, `UPDATE jobfence_jobs SET state = $2, finalized_at = now() - $3 * interval '1 minute' WHERE id = $1`,
				res.ID, st, age); err != nil {
				t.Fatal(err)
			}
			ids[aged{st, age}] = res.ID
		}
	}
	left := func() []aged {
		var out []aged
		for a, id := range ids {
			if where(t, db.Pool, id) != "" {
				out = append(out, a)
			}
		}
		slices.SortFunc(out, func(x, y aged) int {
			if x.state != y.state {
				return map[queue.State]int{queue.StateCompleted: 0, queue.StateCancelled: 1, queue.StateDiscarded: 2}[x.state] -
					map[queue.State]int{queue.StateCompleted: 0, queue.StateCancelled: 1, queue.StateDiscarded: 2}[y.state]
			}
			return x.age - y.age
		})
		return out
	}
	// Four hours for all: nothing is old enough.
	if n, err := c.Prune(ctx, 4*time.Hour, 100); err != nil || n != 0 {
		t.Fatalf("Prune(4h) = %d, %v; want nothing pruned", n, err)
	}
	r := queue.Retention{Completed: time.Hour, Cancelled: 2 * time.Hour, Discarded: 3 * time.Hour}
	if n, err := c.PruneStates(ctx, r, 100); err != nil || n != 6 {
		t.Fatalf("PruneStates(%+v) = %d, %v; want 6 pruned", r, n, err)
	}
	want := []aged{{queue.StateCancelled, 90}, {queue.StateDiscarded, 90}, {queue.StateDiscarded, 150}}
	if got := left(); !slices.Equal(got, want) {
		t.Fatalf("kept %v, want %v: each state pruned past its own retention", got, want)
	}
	// A batch limit holds across states, oldest first.
	if n, err := c.PruneStates(ctx, queue.Retention{}.WithDefault(time.Minute), 2); err != nil || n != 2 {
		t.Fatalf("PruneStates(1m, limit 2) = %d, %v; want 2", n, err)
	}
	if got := left(); !slices.Equal(got, []aged{{queue.StateDiscarded, 90}}) { // finalized last
		t.Fatalf("kept %v, want the youngest job", got)
	}
}

// TestRetentionDefaults: a zero field takes the one retention; Shortest
// and Longest span the three.
func TestRetentionDefaults(t *testing.T) {
	r := queue.Retention{Discarded: 72 * time.Hour}.WithDefault(24 * time.Hour)
	if r != (queue.Retention{Completed: 24 * time.Hour, Cancelled: 24 * time.Hour, Discarded: 72 * time.Hour}) ||
		r.Shortest() != 24*time.Hour || r.Longest() != 72*time.Hour {
		t.Fatalf("retention %+v, shortest %s, longest %s", r, r.Shortest(), r.Longest())
	}
}
