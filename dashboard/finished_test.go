package dashboard_test

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/jobfence/jobfence/dashboard"
	"github.com/jobfence/jobfence/queue"
)

// TestFinishedJobPages: a job completed once the finished-jobs partitions
// exist (it moved to jobfence_jobs_finished) has its page, with its
// finishing time, is in the history of completed jobs, and counts in
// /metrics, beside one completed in the jobs table before them.
func TestFinishedJobPages(t *testing.T) {
	d := newDash(t, dashboard.Options{})
	ctx := context.Background()
	before := d.enqueue(queue.EnqueueParams{Kind: "invoice", Queue: "billing"})
	d.finish(d.claim("billing", 1)[0], queue.OutcomeComplete, nil)
	if _, err := d.q.MaintainFinished(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	moved := d.enqueue(queue.EnqueueParams{Kind: "invoice", Queue: "billing", Args: []byte(`{"customer":77}`)})
	d.finish(d.claim("billing", 1)[0], queue.OutcomeComplete, nil)
	var n int
	if err := d.db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs_finished WHERE id = $1`, moved).Scan(&n); err != nil || n != 1 {
		t.Fatalf("job %d not in the finished table: %d, %v", moved, n, err)
	}
	page := d.getOK(fmt.Sprintf("/jobs/%d", moved))
	mustContain(t, "the moved job's page", page, "&#34;customer&#34;: 77", "completed")
	history := d.getOK("/jobs?state=completed")
	mustContain(t, "the history", history, fmt.Sprintf(`href="/jobs/%d"`, moved), fmt.Sprintf(`href="/jobs/%d"`, before))
	code, metrics := d.get("/metrics")
	if code != 200 {
		t.Fatalf("GET /metrics = %d", code)
	}
	for _, re := range []string{`(?m)^jobfence_queue_completed\{queue="billing",window="5m"\} 2$`, `(?m)^jobfence_queue_completed\{queue="billing",window="1h"\} 2$`} {
		if !regexp.MustCompile(re).MatchString(metrics) {
			t.Errorf("/metrics lacks %s:\n%s", re, metrics)
		}
	}
}
