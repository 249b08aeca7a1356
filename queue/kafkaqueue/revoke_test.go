package kafkaqueue

import (
	"context"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
)

// TestRevokeCancelsRunningJobs holds a job while a second member joins: the
// rebalance cancels it at once (Cancelled sends its ID, Heartbeat reports it
// lost, Finish is stale), and its message runs again under a higher fence
// with the same idempotency key.
func TestRevokeCancelsRunningJobs(t *testing.T) {
	topic := uniqueName("jobs")
	c := newCluster(t, 2, topic)
	cl := newTestClient(t, c)
	ctx := context.Background()
	cfg := c.config(uniqueName("g"), topic)

	a, err := NewBackend(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	cancelled, err := a.Cancelled(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Enqueue(ctx, queue.EnqueueParams{Queue: topic, Kind: "hold"}, EnqueueOptions{PartitionKey: "k"}); err != nil {
		t.Fatal(err)
	}
	held := claimN(t, a, topic, 1, time.Minute)[0]

	b, err := NewBackend(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	select {
	case l := <-cancelled:
		if l != held.Lease() {
			t.Fatalf("Cancelled sent %+v, want the held job's lease %+v", l, held.Lease())
		}
	case <-time.After(time.Minute):
		t.Fatal("the rebalance did not cancel the running job")
	}
	lost, err := a.Heartbeat(ctx, []queue.Lease{held.Lease()}, time.Minute)
	if err != nil || len(lost) != 1 {
		t.Fatalf("Heartbeat after the rebalance = %v, %v; want the lease lost", lost, err)
	}
	stale, err := a.Finish(ctx, []queue.Finish{{Lease: held.Lease(), Outcome: queue.OutcomeComplete}})
	if err != nil || len(stale) != 1 {
		t.Fatalf("Finish after the rebalance = %v, %v; want it stale", stale, err)
	}

	// The message runs again, at whichever member owns its partition now.
	var again *queue.Job
	testwatch.WaitFor(t, time.Minute, "the held job to be delivered again", func() bool {
		for _, m := range []*Backend{a, b} {
			js, err := m.Claim(ctx, queue.ClaimParams{Queue: topic, Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			if len(js) > 0 {
				again = js[0]
				return true
			}
		}
		return false
	})
	if again.Key != held.Key || again.Fence <= held.Fence || again.Attempt != 1 {
		t.Fatalf("delivered again as %s fence %d attempt %d; want key %s, a fence above %d, attempt 1",
			again.Key, again.Fence, again.Attempt, held.Key, held.Fence)
	}
}
