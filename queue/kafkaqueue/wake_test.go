package kafkaqueue

import (
	"context"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// TestWakeDuringNotifications calls Wake over and over while another
// goroutine snoozes a job in a tight loop, so that every Finish notifies the
// queue's waiters. Each Wake must return at once, whenever the notification
// lands: a registration that a notification fills before Wake's own first
// value once blocked Wake (and so the worker's start) for ever.
func TestWakeDuringNotifications(t *testing.T) {
	topic := uniqueName("jobs")
	c := newCluster(t, 1, topic)
	cl := newTestClient(t, c)
	ctx := context.Background()
	if err := cl.Enqueue(ctx, queue.EnqueueParams{Queue: topic, Kind: "spin"}); err != nil {
		t.Fatal(err)
	}
	b, err := NewBackend(c.config(uniqueName("g"), topic))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	j := claimN(t, b, topic, 1, time.Minute)[0]
	if _, err := b.Finish(ctx, []queue.Finish{{Lease: j.Lease(), Outcome: queue.OutcomeSnooze}}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	spun := make(chan int)
	go func() {
		n := 0
		defer func() { spun <- n }()
		f := queue.Finish{Outcome: queue.OutcomeSnooze}
		for {
			select {
			case <-stop:
				return
			default:
			}
			js, _ := b.Claim(ctx, queue.ClaimParams{Queue: topic, Limit: 1})
			if len(js) == 0 {
				continue
			}
			f.Lease = js[0].Lease()
			if _, err := b.Finish(ctx, []queue.Finish{f}); err != nil {
				t.Errorf("Finish: %v", err)
				return
			}
			n++
		}
	}()
	done := make(chan int)
	go func() {
		n := 0
		defer func() { done <- n }()
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			wctx, cancel := context.WithCancel(ctx)
			wake, err := b.Wake(wctx, topic)
			if err != nil {
				t.Errorf("Wake: %v", err)
				cancel()
				return
			}
			<-wake // the first value is always there
			cancel()
			n++
		}
	}()
	select {
	case n := <-done:
		close(stop)
		s := <-spun
		t.Logf("%d Wake calls during %d notifying Finishes", n, s)
		if s == 0 {
			t.Fatal("no Finish ran alongside the Wake calls")
		}
	case <-time.After(time.Minute):
		t.Fatal("a Wake call did not return within a minute")
	}
}
