package kafkaqueue

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
)

// TestMetadataHeaders: an InsertHook's metadata and a job's own travel as
// message headers and come back as Job.Metadata; a reserved key is refused;
// the hook learns every result; commit lag drains once jobs complete.
func TestMetadataHeaders(t *testing.T) {
	topic := uniqueName("meta")
	c := newCluster(t, 1, topic)
	var done atomic.Int64
	var failed atomic.Int64
	cl, err := NewClient(Config{Brokers: c.Brokers, Logger: quietLogger(),
		InsertHook: func(ctx context.Context, ps []queue.EnqueueParams) (context.Context, map[string]string, func(int64, error)) {
			return ctx, map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}, func(n int64, err error) {
				done.Add(n)
				if err != nil {
					failed.Add(1)
				}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	jobs := []EnqueueJob{
		{Params: queue.EnqueueParams{Queue: topic, Kind: "k", Metadata: map[string]string{"tenant": "t1"}}},
		{Params: queue.EnqueueParams{Queue: topic, Kind: "k"}},
	}
	if err := cl.EnqueueMany(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	bad := queue.EnqueueParams{Queue: topic, Kind: "k", Metadata: map[string]string{HeaderKind: "x"}}
	var ip *queue.InvalidParamsError
	if err := cl.Enqueue(ctx, bad); !errors.As(err, &ip) || ip.Field != "Metadata" {
		t.Fatalf("reserved metadata key: %v, want an InvalidParamsError on Metadata", err)
	}
	if done.Load() != 2 || failed.Load() != 1 {
		t.Fatalf("hook saw %d inserted and %d failures, want 2 and 1", done.Load(), failed.Load())
	}

	cfg := c.config(uniqueName("g"), topic)
	cfg.ConcurrencyPerPartition = 10
	b, err := NewBackend(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got := claimN(t, b, topic, 2, time.Minute)
	tenants := 0
	var fs []queue.Finish
	for _, j := range got {
		if j.Metadata["traceparent"] == "" {
			t.Errorf("job %d metadata %v has no traceparent", j.ID, j.Metadata)
		}
		if j.Metadata["tenant"] == "t1" {
			tenants++
		}
		fs = append(fs, queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeComplete})
	}
	if tenants != 1 {
		t.Errorf("%d jobs carry the tenant, want 1", tenants)
	}
	if _, err := b.Finish(ctx, fs); err != nil {
		t.Fatal(err)
	}
	testwatch.WaitFor(t, time.Minute, "the finished offsets committed", func() bool {
		a := b.Assignment()
		return a.CommitLag == 0 && len(a.Partitions[topic]) == 1
	})
}
