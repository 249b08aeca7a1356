package pgqueue_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/sqlfreeze"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestFrozenGranterHoldsUpNoGrant: an instance frozen in the middle of a
// grant (its batch sent and its replies held, or its replies read and the
// process stopped before it goes on) holds nothing of the limit: the
// server commits the grant without it, its backend is left idle with no
// lock, the jobs it granted are claimed by another instance, and that
// instance's grants of the same limit go on at once, never over the
// limit. docs/limits.md states the bound: a grant waits for another
// grant's statement, never for a client. A plain concurrency limit is
// granted by one statement, one with a rate by another: each is frozen.
func TestFrozenGranterHoldsUpNoGrant(t *testing.T) {
	for _, tt := range []struct {
		name string
		sent bool
		rate int
	}{
		{"batch sent, replies held", true, 0}, {"replies read", false, 0},
		{"rate, batch sent, replies held", true, 1000}, {"rate, replies read", false, 1000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, db := newClient(t)
			ctx := context.Background()
			const limit = 2
			l := pgqueue.Limit{Name: "fz", Queue: "fz", Concurrency: limit}
			if tt.rate > 0 {
				l.Rate, l.Period = tt.rate, time.Hour
			}
			setLimit(t, c, l)
			enqueueN(t, c, queue.EnqueueParams{Kind: "k", Queue: "fz"}, 3*limit)
			running := claim(t, c, "fz", 10, time.Minute)
			if len(running) != limit {
				t.Fatalf("claimed %d jobs, want the limit's %d", len(running), limit)
			}
			overLimit := func() {
				t.Helper()
				var n int
				if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE queue = 'fz' AND state IN ('available', 'running')`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n > limit {
					t.Fatalf("%d jobs hold the limit's slots, the limit is %d", n, limit)
				}
			}
			a, fz := frozenClient(t, db)
			// A first grant, of no slot, teaches the instance which
			// statement the limit's grants take (see grantRoutes).
			if _, err := a.GrantWaiting(ctx, 100); err != nil {
				t.Fatal(err)
			}
			// The running jobs finish without their completion's grant,
			// so that the frozen instance's grant is the one that hands
			// their slots on.
			if _, err := db.Pool.Exec(ctx, `UPDATE jobfence_jobs SET state = 'completed', finalized_at = now() WHERE queue = 'fz' AND state = 'running'`); err != nil {
				t.Fatal(err)
			}
			stmt := "WITH fr AS MATERIALIZED" // grantConcurrencySQL
			if tt.rate > 0 {
				stmt = "WITH l AS MATERIALIZED" // grantSQL
			}
			fz.Arm(sqlfreeze.Point{Match: mentions(stmt), Sent: tt.sent, Batch: true})
			done := make(chan error, 1)
			go func() {
				_, err := a.GrantWaiting(ctx, 100)
				done <- err
			}()
			pid := fz.Frozen(t, freezeWithin)
			// Its grant committed without it: the slots went to jobs
			// another instance claims.
			var granted []*queue.Job
			eventually(t, "the frozen instance's grant to make the next jobs available", func() bool {
				granted = append(granted, claim(t, c, "fz", 10, time.Minute)...)
				return len(granted) == limit
			})
			// Its backend holds no transaction and no lock.
			sqlfreeze.WaitIdle(t, db.Pool, pid, freezeWithin)
			overLimit()
			// Another instance's grant of the limit runs at once while
			// the first is still frozen: the completions' grants hand the
			// last jobs on.
			began := time.Now()
			complete(t, c, granted...)
			if _, err := c.GrantWaiting(ctx, 100); err != nil {
				t.Fatalf("a grant beside the frozen one: %v", err)
			}
			last := claim(t, c, "fz", 10, time.Minute)
			if len(last) != limit {
				t.Fatalf("claimed %d of the last jobs beside the frozen granter, want %d", len(last), limit)
			}
			if took := time.Since(began); took > freezeWithin {
				t.Fatalf("the grants beside the frozen one took %s", took)
			}
			overLimit()
			fz.Thaw()
			if err := <-done; err != nil {
				t.Fatalf("the thawed grant: %v", err)
			}
			complete(t, c, last...)
			var left int
			if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE queue = 'fz' AND state <> 'completed'`).Scan(&left); err != nil || left != 0 {
				t.Fatalf("%d jobs not completed (%v), want every job run once", left, err)
			}
		})
	}
}
