package pgqueue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestBulk: RetryMatching and DeleteMatching change every job the filter
// selects, across several batches, and skip the jobs they must not touch
// (running ones; completed ones for a retry).
func TestBulk(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	enqueue := func(q string, n int) []int64 {
		var ids []int64
		for range n {
			res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "bulk", Queue: q})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, res.ID)
		}
		return ids
	}
	running := enqueue("bulk", 2)
	claimed := claim(t, c, "bulk", 2, time.Minute)
	if err := c.Complete(ctx, claimed[1].Lease()); err != nil {
		t.Fatal(err)
	}
	for _, id := range append(enqueue("bulk", 7), enqueue("other", 3)...) {
		if err := c.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	enqueue("bulk", 2)
	counts := func(q string) map[queue.State]int64 {
		t.Helper()
		m, err := c.Counts(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}

	n, err := c.RetryMatching(ctx, pgqueue.BulkParams{Queue: "bulk", State: queue.StateCancelled, BatchSize: 3})
	if err != nil || n != 7 {
		t.Fatalf("RetryMatching(cancelled) = %d, %v; want 7", n, err)
	}
	if m := counts("bulk"); m[queue.StateAvailable] != 9 || m[queue.StateCancelled] != 0 || m[queue.StateRunning] != 1 || m[queue.StateCompleted] != 1 {
		t.Fatalf("bulk after the retry: %v", m)
	}
	if m := counts("other"); m[queue.StateCancelled] != 3 {
		t.Fatalf("other queue after the retry: %v; want untouched", m)
	}
	// Without a state, the retry passes over the running and completed jobs.
	if n, err := c.RetryMatching(ctx, pgqueue.BulkParams{Queue: "bulk", BatchSize: 2}); err != nil || n != 9 {
		t.Fatalf("RetryMatching(all of bulk) = %d, %v; want 9", n, err)
	}
	if n, err := c.DeleteMatching(ctx, pgqueue.BulkParams{Queue: "bulk", BatchSize: 4}); err != nil || n != 10 {
		t.Fatalf("DeleteMatching(bulk) = %d, %v; want 10", n, err)
	}
	if m := counts("bulk"); len(m) != 1 || m[queue.StateRunning] != 1 {
		t.Fatalf("bulk after the delete: %v; want the running job alone", m)
	}
	if j, err := c.Get(ctx, running[0]); err != nil || j.State != queue.StateRunning {
		t.Fatalf("running job after the delete: %+v, %v", j, err)
	}

	for _, tt := range []struct {
		name string
		call func() (int64, error)
		want string
	}{
		{"retry running", func() (int64, error) {
			return c.RetryMatching(ctx, pgqueue.BulkParams{State: queue.StateRunning})
		}, "pgqueue: retry matching: jobfence: no bulk action on that state: running jobs are held by their workers; cancel them first"},
		{"retry completed", func() (int64, error) {
			return c.RetryMatching(ctx, pgqueue.BulkParams{State: queue.StateCompleted})
		}, "pgqueue: retry matching: jobfence: no bulk action on that state: completed jobs ran successfully, and retrying them would repeat their effects; retry them one by one with RetryForce"},
		{"delete running", func() (int64, error) {
			return c.DeleteMatching(ctx, pgqueue.BulkParams{State: queue.StateRunning})
		}, "pgqueue: delete matching: jobfence: no bulk action on that state: running jobs are held by their workers; cancel them first"},
	} {
		if n, err := tt.call(); n != 0 || !errors.Is(err, pgqueue.ErrBulkState) || err.Error() != tt.want {
			t.Errorf("%s = %d, %v; want %q", tt.name, n, err, tt.want)
		}
	}
	if _, err := c.DeleteMatching(ctx, pgqueue.BulkParams{State: "gone"}); !errors.Is(err, queue.ErrUnknownState) {
		t.Errorf("DeleteMatching(State: gone) = %v, want ErrUnknownState", err)
	}
	if m := counts("other"); m[queue.StateCancelled] != 3 {
		t.Fatalf("other queue at the end: %v; want untouched", m)
	}
}
