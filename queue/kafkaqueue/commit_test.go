package kafkaqueue

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/jobfence/jobfence/internal/devenv/kafkaenv"
	"github.com/jobfence/jobfence/queue"
)

// newFakeCluster is newCluster on an in-process broker whose requests the
// test may intercept. It skips the test when KAFKA_BROKERS names a real one.
func newFakeCluster(t *testing.T, partitions int, topic string) (*testCluster, *kfake.Cluster) {
	t.Helper()
	if os.Getenv("KAFKA_BROKERS") != "" {
		t.Skip("needs the in-process broker, to make it refuse a request")
	}
	kc, err := kafkaenv.Start(int32(partitions), time.Second,
		topic, topic+DefaultRetryTopicSuffix, topic+DefaultDeadLetterTopicSuffix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kc.Close)
	return &testCluster{Brokers: kc.ListenAddrs()}, kc
}

// refuseCommitsOf makes the broker answer the OffsetCommit requests that
// commit offset of topic with code, n times.
func refuseCommitsOf(kc *kfake.Cluster, topic string, offset int64, code int16, n int32) *atomic.Int32 {
	var refused atomic.Int32
	kc.ControlKey(int16(kmsg.OffsetCommit), func(r kmsg.Request) (kmsg.Response, error, bool) {
		req := r.(*kmsg.OffsetCommitRequest)
		match := false
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				match = match || rt.Topic == topic && rp.Offset == offset
			}
		}
		if !match || refused.Load() >= n {
			return nil, nil, false
		}
		if refused.Add(1) < n {
			kc.KeepControl()
		}
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range req.Topics {
			t := kmsg.NewOffsetCommitResponseTopic()
			t.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				p := kmsg.NewOffsetCommitResponseTopicPartition()
				p.Partition = rp.Partition
				p.ErrorCode = code
				t.Partitions = append(t.Partitions, p)
			}
			resp.Topics = append(resp.Topics, t)
		}
		return resp, nil, true
	})
	return &refused
}

// TestSyncCommitFailureAfterApply shows that with SyncCommit a commit that
// fails for a reason other than the generation (here NOT_COORDINATOR) does
// not make Finish fail once the outcomes are applied: the lease is not
// stale, and the background committer commits the offset afterwards.
func TestSyncCommitFailureAfterApply(t *testing.T) {
	topic := uniqueName("jobs")
	c, kc := newFakeCluster(t, 1, topic)
	cl := newTestClient(t, c)
	ctx := context.Background()
	if err := cl.Enqueue(ctx, queue.EnqueueParams{Queue: topic, Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	group := uniqueName("g")
	cfg := c.config(group, topic)
	cfg.SyncCommit = true
	cfg.CommitInterval = time.Hour // only Finish commits, and asks the committer to retry
	b, err := NewBackend(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	jobs := claimN(t, b, topic, 1, time.Minute)
	refused := refuseCommitsOf(kc, topic, 1, kerr.NotCoordinator.Code, 1)
	stale, err := b.Finish(ctx, []queue.Finish{{Lease: jobs[0].Lease(), Outcome: queue.OutcomeComplete}})
	if err != nil || len(stale) != 0 {
		t.Fatalf("Finish with its commit refused as NOT_COORDINATOR = %v, %v; want no stale lease and no error", stale, err)
	}
	if refused.Load() != 1 {
		t.Fatalf("the broker refused %d commits of offset 1, want the one of Finish", refused.Load())
	}
	waitCommitted(t, c, group, topic, 1)
}
