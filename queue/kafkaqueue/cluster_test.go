package kafkaqueue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/jobfence/jobfence/internal/devenv/kafkaenv"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testCluster is a broker with a test's own topics: the real one named by
// KAFKA_BROKERS, or an in-process kfake broker of the test's own.
type testCluster struct {
	Brokers []string
	Real    bool
}

// newCluster provides topics of partitions partitions each (and the retry
// and dead-letter topics of every one) on a broker for t.
func newCluster(t testing.TB, partitions int, topics ...string) *testCluster {
	t.Helper()
	testwatch.Bound(t, testHangLimit)
	var all []string
	for _, tp := range topics {
		all = append(all, tp, tp+DefaultRetryTopicSuffix, tp+DefaultDeadLetterTopicSuffix)
	}
	if env := os.Getenv("KAFKA_BROKERS"); env != "" {
		brokers := strings.Split(env, ",")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cl := &kafka.Client{Addr: kafka.TCP(brokers...)}
		req := &kafka.CreateTopicsRequest{}
		for _, tp := range all {
			req.Topics = append(req.Topics, kafka.TopicConfig{Topic: tp, NumPartitions: partitions, ReplicationFactor: 1})
		}
		res, err := cl.CreateTopics(ctx, req)
		if err != nil {
			t.Fatalf("create topics: %v", err)
		}
		for tp, err := range res.Errors {
			if err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
				t.Fatalf("create topic %s: %v", tp, err)
			}
		}
		return &testCluster{Brokers: brokers, Real: true}
	}
	c, err := kafkaenv.Start(int32(partitions), time.Second, all...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &testCluster{Brokers: c.ListenAddrs()}
}

// testHangLimit bounds one test, cleanups included. The longest test here,
// TestRebalanceEveryEffectOnce, takes about 10 s alone and under 2 minutes
// on two cores shared with four other test binaries.
const testHangLimit = 5 * time.Minute

// paddedArgs is a JSON object of about n bytes: args for a job whose
// message a topic with a small max.message.bytes refuses.
func paddedArgs(n int) []byte {
	return []byte(`{"pad":"` + strings.Repeat("x", n) + `"}`)
}

func uniqueName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// quietLogger discards logs unless KAFKAQUEUE_TEST_LOG is set, then logs to
// stderr at debug level, kafka-go's noise included.
func quietLogger() *slog.Logger {
	if os.Getenv("KAFKAQUEUE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// testConfig is a Config for fast rebalances on a test broker.
func (c *testCluster) config(group string, topics ...string) Config {
	return Config{
		Brokers:           c.Brokers,
		GroupID:           group,
		Topics:            topics,
		HeartbeatInterval: 300 * time.Millisecond,
		JoinGroupBackoff:  300 * time.Millisecond,
		SessionTimeout:    10 * time.Second,
		RebalanceTimeout:  10 * time.Second,
		CommitInterval:    200 * time.Millisecond,
		MaxWait:           200 * time.Millisecond,
		Logger:            quietLogger(),
	}
}

func newTestClient(t testing.TB, c *testCluster) *Client {
	t.Helper()
	cl, err := NewClient(Config{Brokers: c.Brokers, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// endOffsets returns the last offset+1 of every partition of topic.
func endOffsets(ctx context.Context, brokers []string, topic string, partitions int) (map[int]int64, error) {
	cl := &kafka.Client{Addr: kafka.TCP(brokers...)}
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for p := range partitions {
		req.Topics[topic] = append(req.Topics[topic], kafka.LastOffsetOf(p))
	}
	res, err := cl.ListOffsets(ctx, req)
	if err != nil {
		return nil, err
	}
	out := map[int]int64{}
	for _, po := range res.Topics[topic] {
		if po.Error != nil {
			return nil, po.Error
		}
		out[po.Partition] = po.LastOffset
	}
	return out, nil
}

// committedOffsets returns the group's committed offsets of topic.
func committedOffsets(ctx context.Context, brokers []string, group, topic string, partitions int) (map[int]int64, error) {
	cl := &kafka.Client{Addr: kafka.TCP(brokers...)}
	ps := make([]int, partitions)
	for i := range ps {
		ps[i] = i
	}
	res, err := cl.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: ps}})
	if err != nil {
		return nil, err
	}
	if res.Error != nil {
		return nil, res.Error
	}
	out := map[int]int64{}
	for _, p := range res.Topics[topic] {
		if p.Error != nil {
			return nil, p.Error
		}
		out[p.Partition] = p.CommittedOffset
	}
	return out, nil
}

// waitCommitted waits until the group has committed every message of topic.
func waitCommitted(t testing.TB, c *testCluster, group, topic string, partitions int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var last string
	deadline := time.Now().Add(time.Minute)
	for {
		last = uncommitted(ctx, c, group, topic, partitions)
		if last == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("offsets of %s not all committed after a minute: %s", topic, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// uncommitted describes the first partition of topic whose messages are not
// all committed, or returns "".
func uncommitted(ctx context.Context, c *testCluster, group, topic string, partitions int) string {
	end, err := endOffsets(ctx, c.Brokers, topic, partitions)
	if err != nil {
		return err.Error()
	}
	got, err := committedOffsets(ctx, c.Brokers, group, topic, partitions)
	if err != nil {
		return err.Error()
	}
	for p, e := range end {
		if e > 0 && got[p] != e {
			return fmt.Sprintf("partition %d: committed %d of %d", p, got[p], e)
		}
	}
	return ""
}

// readAll reads every message of every partition of topic from the start
// until n have been read.
func readAll(t testing.TB, c *testCluster, topic string, partitions, n int) []kafka.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out []kafka.Message
	var mu sync.Mutex
	var wg sync.WaitGroup
	for p := range partitions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := kafka.NewReader(kafka.ReaderConfig{Brokers: c.Brokers, Topic: topic, Partition: p, MaxWait: 200 * time.Millisecond})
			defer r.Close()
			for {
				mu.Lock()
				enough := len(out) >= n
				mu.Unlock()
				if enough {
					return
				}
				rctx, rcancel := context.WithTimeout(ctx, 500*time.Millisecond)
				m, err := r.ReadMessage(rctx)
				rcancel()
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					continue
				}
				mu.Lock()
				out = append(out, m)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(out) < n {
		t.Fatalf("read %d messages of %s, want %d", len(out), topic, n)
	}
	return out
}
