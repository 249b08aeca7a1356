package kafkaqueue

import (
	"context"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// TestDeadlineAndTimeoutHeaders: a job's Deadline and Timeout travel as
// headers and come back on the claimed job, for the worker to keep; a job
// without them has none.
func TestDeadlineAndTimeoutHeaders(t *testing.T) {
	topic := uniqueName("limits")
	c := newCluster(t, 1, topic)
	cl, err := NewClient(Config{Brokers: c.Brokers, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	deadline := time.Now().Add(time.Hour).Round(0)
	if err := cl.EnqueueMany(ctx, []EnqueueJob{
		{Params: queue.EnqueueParams{Queue: topic, Kind: "limited", Deadline: deadline, Timeout: 3 * time.Second}},
		{Params: queue.EnqueueParams{Queue: topic, Kind: "plain"}},
	}); err != nil {
		t.Fatal(err)
	}
	cfg := c.config(uniqueName("g"), topic)
	cfg.ConcurrencyPerPartition = 2
	b, err := NewBackend(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var fs []queue.Finish
	for _, j := range claimN(t, b, topic, 2, time.Minute) {
		switch j.Kind {
		case "limited":
			if !j.Deadline.Equal(deadline) || j.Timeout != 3*time.Second {
				t.Errorf("limited job: Deadline %v, Timeout %v; want %v, 3s", j.Deadline, j.Timeout, deadline)
			}
		default:
			if !j.Deadline.IsZero() || j.Timeout != 0 {
				t.Errorf("plain job: Deadline %v, Timeout %v; want none", j.Deadline, j.Timeout)
			}
		}
		fs = append(fs, queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeComplete})
	}
	if _, err := b.Finish(ctx, fs); err != nil {
		t.Fatal(err)
	}
}
