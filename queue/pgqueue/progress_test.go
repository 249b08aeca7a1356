package pgqueue_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// TestRecordProgressIsFenced: progress is stored only while the job runs
// under the writer's fence. Once the old attempt's lease ran out and
// another attempt claimed the job, the old attempt's write returns a
// *queue.StaleFenceError and leaves the new attempt's progress as it is;
// after the job completed no write changes it; and it stays, readable by
// Get, on the completed job moved to the finished jobs' table.
func TestRecordProgressIsFenced(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	if _, err := c.MaintainFinished(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	progress := func() string {
		t.Helper()
		j, err := c.Get(ctx, res.ID)
		if err != nil {
			t.Fatal(err)
		}
		return string(j.Progress)
	}
	if p := progress(); p != "" {
		t.Fatalf("a new job's progress is %q, want none", p)
	}
	old := claimOne(t, c, "default")
	if err := c.RecordProgress(ctx, old.Lease(), []byte(`{"step":"old"}`)); err != nil {
		t.Fatal(err)
	}
	if p := progress(); p != `{"step": "old"}` {
		t.Fatalf("progress %q, want the old attempt's", p)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE jobfence_jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, old.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Rescue(ctx, queue.RescueParams{Limit: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Promote(ctx, 10); err != nil {
		t.Fatal(err)
	}
	cur := claimOne(t, c, "default")
	if cur.Fence <= old.Fence {
		t.Fatalf("the new claim's fence %d is not above the old %d", cur.Fence, old.Fence)
	}
	if err := c.RecordProgress(ctx, cur.Lease(), []byte(`{"step":"new"}`)); err != nil {
		t.Fatal(err)
	}
	err = c.RecordProgress(ctx, old.Lease(), []byte(`{"step":"stale"}`))
	var sf *queue.StaleFenceError
	if !errors.As(err, &sf) || !errors.Is(err, queue.ErrStaleFence) || sf.Fence != old.Fence ||
		err.Error() != fmt.Sprintf("jobfence: job %d: fence %d is stale: the claim was lost to a newer owner; nothing was written", old.ID, old.Fence) {
		t.Fatalf("the stale attempt's write = %v, want a StaleFenceError of fence %d", err, old.Fence)
	}
	if p := progress(); p != `{"step": "new"}` {
		t.Fatalf("progress %q after the stale write, want the new attempt's", p)
	}
	if stale := finish(t, c, queue.Finish{Lease: cur.Lease(), Outcome: queue.OutcomeComplete}); len(stale) > 0 {
		t.Fatalf("completion stale: %v", stale)
	}
	if err := c.RecordProgress(ctx, cur.Lease(), []byte(`{"step":"after"}`)); !errors.Is(err, queue.ErrStaleFence) {
		t.Fatalf("a write after the completion = %v, want a stale fence", err)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs_finished WHERE id = $1 AND progress->>'step' = 'new'`, res.ID).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the completed row in jobfence_jobs_finished with the progress: %d, %v", n, err)
	}
	if p := progress(); p != `{"step": "new"}` {
		t.Fatalf("progress %q after the completion, want the new attempt's", p)
	}
}
