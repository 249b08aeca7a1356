package pgqueue_test

import (
	"context"
	"encoding/json"
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
func TestClaimPlan(t *testing.T) {
	for _, tt := range []struct {
		name         string
		analyzeEmpty bool
	}{
		{"analyzed after filling", false},
		{"analyzed empty, then filled", true},
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
			// An unnamed statement's custom plan, as behind PgBouncer.
			var raw []byte
			args := []any{pgx.QueryExecModeDescribeExec, "default", 1000, time.Minute.Microseconds(), "w", (250 * time.Millisecond).Microseconds()}
			if err := db.Pool.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+pgqueue.ClaimSQL, args...).Scan(&raw); err != nil {
				t.Fatal(err)
			}
			var plan []struct{ Plan planNode }
			if err := json.Unmarshal(raw, &plan); err != nil || len(plan) != 1 {
				t.Fatalf("EXPLAIN output %.300s: %v", raw, err)
			}
			found := false
			for _, name := range []string{"CTE hi", "CTE lo"} {
				cte := plan[0].Plan.find(name)
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
		})
	}
}
