package pgqueue_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestClaimPlan: the claim starts its scan of the available-jobs index at
// the queue's claim position (an index condition), rather than reading
// from the index's start and filtering, and reads the index in order (no
// sort), whether the table's statistics are fresh or were taken while it
// was empty. Behind PgBouncer every claim is an unnamed statement, planned
// anew with the statistics of the moment; before the claim position, a
// table analyzed empty made that plan a bitmap scan of every waiting job
// and a sort, and halved the rate until autovacuum analyzed it again.
// Directly, a prepared statement settles on a generic plan, which cannot
// know the claim's LIMIT: the update must still find its rows by ctid.
func TestClaimPlan(t *testing.T) {
	for _, tt := range []struct {
		name         string
		analyzeEmpty bool
		generic      bool
	}{
		{"analyzed after filling", false, false},
		{"analyzed empty, then filled", true, false},
		{"generic plan, as a prepared statement gets", false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, db := newClient(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ps := make([]queue.EnqueueParams, 20000)
			for i := range ps {
				ps[i] = queue.EnqueueParams{Kind: "k"}
			}
			fill := func() {
				if _, err := c.EnqueueMany(ctx, ps); err != nil {
					t.Fatal(err)
				}
			}
			if !tt.analyzeEmpty {
				fill()
			}
			if _, err := db.Pool.Exec(ctx, "ANALYZE jobfence_jobs"); err != nil {
				t.Fatal(err)
			}
			if tt.analyzeEmpty {
				fill()
			}
			// An unnamed statement's custom plan, as behind PgBouncer; or
			// the generic plan that a prepared statement (pgx's default
			// mode, directly) settles on after five runs.
			var raw []byte
			args := []any{pgx.QueryExecModeDescribeExec, "default", 1000, time.Minute.Microseconds(), "w", (250 * time.Millisecond).Microseconds(), (20 * time.Millisecond).Microseconds(), 32, 16 << 10, false}
			conn, err := db.Pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Release()
			if tt.generic {
				if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
					t.Fatal(err)
				}
				defer conn.Exec(context.Background(), "RESET plan_cache_mode")
				if _, err := conn.Exec(ctx, "PREPARE claim AS "+pgqueue.ClaimSQL); err != nil {
					t.Fatal(err)
				}
				defer conn.Exec(context.Background(), "DEALLOCATE claim")
				err = conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) EXECUTE claim('default', 1000, 60000000, 'w', 250000, 20000, 32, 16384, false)", pgx.QueryExecModeSimpleProtocol).Scan(&raw)
			} else {
				err = conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+pgqueue.ClaimSQL, args...).Scan(&raw)
			}
			if err != nil {
				t.Fatal(err)
			}
			plan := parsePlan(t, raw)
			found := false
			for _, name := range []string{"CTE hi", "CTE lo", "CTE wrap"} {
				cte := plan.find(name)
				if cte == nil {
					t.Fatalf("no %s in the plan:\n%s", name, raw)
				}
				cte.walk(func(p planNode) {
					switch {
					case name == "CTE lo" && p.Index == "jobfence_jobs_available" && p.Type == "Index Scan" && strings.Contains(p.IndexCond, "ROW(priority, scheduled_at, id) >"):
						found = true
					case p.Type == "Sort" || strings.HasPrefix(p.Type, "Bitmap") || p.Type == "Seq Scan":
						t.Errorf("the claim finds its jobs in %s with a %s; plan:\n%s", name, p.Type, raw)
					}
				})
			}
			if !found {
				t.Fatalf("the claim does not start its index scan at the claim position; plan:\n%s", raw)
			}
			// The update finds the claimed rows by ctid: joined any other
			// way, a generic plan hashed a scan of the whole table.
			update := plan.find("CTE u")
			if update == nil {
				t.Fatalf("no CTE u in the plan:\n%s", raw)
			}
			tid := false
			update.walk(func(p planNode) {
				tid = tid || p.Type == "Tid Scan"
			})
			plan.walk(func(p planNode) {
				if p.Type == "Seq Scan" && p.Relation == "jobfence_jobs" {
					t.Errorf("the claim scans the whole jobs table; plan:\n%s", raw)
				}
			})
			if !tid {
				t.Fatalf("the claim's update does not find its rows by ctid; plan:\n%s", raw)
			}
		})
	}
}
