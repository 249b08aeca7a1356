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
// from the index's start and filtering.
func TestClaimPlan(t *testing.T) {
	c, db := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ps := make([]queue.EnqueueParams, 2000)
	for i := range ps {
		ps[i] = queue.EnqueueParams{Kind: "k"}
	}
	if _, err := c.EnqueueMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "ANALYZE jobfence_jobs"); err != nil {
		t.Fatal(err)
	}
	var raw []byte
	args := []any{pgx.QueryExecModeDescribeExec, "default", 100, time.Minute.Microseconds(), "w", (250 * time.Millisecond).Microseconds()}
	if err := db.Pool.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+pgqueue.ClaimSQL, args...).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var plan []struct{ Plan planNode }
	if err := json.Unmarshal(raw, &plan); err != nil || len(plan) != 1 {
		t.Fatalf("EXPLAIN output %.300s: %v", raw, err)
	}
	found := false
	plan[0].Plan.walk(func(p planNode) {
		if p.Index == "jobfence_jobs_available" && strings.Contains(p.IndexCond, "ROW(priority, scheduled_at, id) >") {
			found = true
		}
	})
	if !found {
		t.Fatalf("the claim does not start its index scan at the claim position; plan:\n%s", raw)
	}
}
