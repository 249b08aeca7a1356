package kafkaqueue

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/jobfence/jobfence/queue"
)

func TestConfigErrors(t *testing.T) {
	ok := Config{Brokers: []string{"127.0.0.1:1"}, GroupID: "g", Topics: []string{"jobs"}}
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"no brokers", func(c *Config) { c.Brokers = nil }, "kafkaqueue: invalid config: Brokers is empty"},
		{"empty broker", func(c *Config) { c.Brokers = []string{""} }, "kafkaqueue: invalid config: Brokers has an empty address"},
		{"no group", func(c *Config) { c.GroupID = "" }, "kafkaqueue: invalid config: GroupID is empty"},
		{"no topics", func(c *Config) { c.Topics = nil }, "kafkaqueue: invalid config: Topics is empty"},
		{"empty topic", func(c *Config) { c.Topics = []string{""} }, "kafkaqueue: invalid config: Topics has an empty topic"},
		{"topic twice", func(c *Config) { c.Topics = []string{"a", "a"} }, `kafkaqueue: invalid config: Topics lists "a" twice`},
		{"negative concurrency", func(c *Config) { c.ConcurrencyPerPartition = -1 }, "kafkaqueue: invalid config: ConcurrencyPerPartition is negative"},
		{"bad start offset", func(c *Config) { c.StartOffset = 42 }, "kafkaqueue: invalid config: StartOffset must be kafka.FirstOffset or kafka.LastOffset"},
		{"same suffixes", func(c *Config) { c.RetryTopicSuffix, c.DeadLetterTopicSuffix = ".x", ".x" }, "kafkaqueue: invalid config: DeadLetterTopicSuffix must differ from RetryTopicSuffix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ok
			tt.mutate(&cfg)
			b, err := NewBackend(cfg)
			if err == nil {
				b.Close()
				t.Fatal("NewBackend accepted the config")
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %T is not a *ConfigError", err)
			}
			if err.Error() != tt.want {
				t.Fatalf("error %q, want %q", err, tt.want)
			}
		})
	}
	if _, err := NewClient(Config{}); err == nil || err.Error() != "kafkaqueue: invalid config: Brokers is empty" {
		t.Fatalf("NewClient(Config{}) = %v", err)
	}
}

func TestConfigTopics(t *testing.T) {
	var c Config
	if got := c.RetryTopic("jobs"); got != "jobs.retry" {
		t.Errorf("RetryTopic = %q", got)
	}
	if got := c.DeadLetterTopic("jobs"); got != "jobs.dlq" {
		t.Errorf("DeadLetterTopic = %q", got)
	}
	c.RetryTopicSuffix = "-r"
	if got := c.RetryTopic("jobs"); got != "jobs-r" {
		t.Errorf("RetryTopic with suffix = %q", got)
	}
}

func TestEnqueueErrors(t *testing.T) {
	topic := uniqueName("jobs")
	c := newCluster(t, 1, topic)
	cl := newTestClient(t, c)
	ctx := context.Background()
	tests := []struct {
		name string
		p    queue.EnqueueParams
		want string
		is   error
	}{
		{"no kind", queue.EnqueueParams{Queue: topic}, "jobfence: invalid enqueue params: Kind is empty", nil},
		{"bad priority", queue.EnqueueParams{Queue: topic, Kind: "k", Priority: 9}, "jobfence: invalid enqueue params: Priority must be between 1 and 4", nil},
		{"bad args", queue.EnqueueParams{Queue: topic, Kind: "k", Args: []byte("{nope")}, "jobfence: invalid enqueue params: Args is not valid JSON", nil},
		{"unique key", queue.EnqueueParams{Queue: topic, Kind: "k", UniqueKey: "u"}, ErrUniqueKeyUnsupported.Error(), ErrUniqueKeyUnsupported},
		{"unique opts", queue.EnqueueParams{Queue: topic, Kind: "k", Unique: &queue.UniqueOpts{ByArgs: true}}, ErrUniqueKeyUnsupported.Error(), ErrUniqueKeyUnsupported},
		{"limit key", queue.EnqueueParams{Queue: topic, Kind: "k", LimitKey: "customer-1"}, ErrLimitsUnsupported.Error(), ErrLimitsUnsupported},
		{"tags", queue.EnqueueParams{Queue: topic, Kind: "k", Tags: []string{"t"}}, ErrTagsUnsupported.Error(), ErrTagsUnsupported},
		{"encrypt", queue.EnqueueParams{Queue: topic, Kind: "k", Encrypt: true}, ErrEncryptionUnsupported.Error(), queue.ErrEncryptionKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := cl.Enqueue(ctx, tt.p)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("Enqueue = %v, want %q", err, tt.want)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Fatalf("errors.Is(%v, %v) = false", err, tt.is)
			}
		})
	}
	// A bad job in a batch names its index, and nothing of the batch is written.
	err := cl.EnqueueMany(ctx, []EnqueueJob{
		{Params: queue.EnqueueParams{Queue: topic, Kind: "k"}},
		{Params: queue.EnqueueParams{Queue: topic}},
	})
	if want := "kafkaqueue: job 1: jobfence: invalid enqueue params: Kind is empty"; err == nil || err.Error() != want {
		t.Fatalf("EnqueueMany = %v, want %q", err, want)
	}
	var ipe *queue.InvalidParamsError
	if !errors.As(err, &ipe) || ipe.Field != "Kind" {
		t.Fatalf("EnqueueMany error is not the InvalidParamsError of Kind: %#v", err)
	}
	end, err := endOffsets(ctx, c.Brokers, topic, 1)
	if err != nil {
		t.Fatal(err)
	}
	if end[0] != 0 {
		t.Fatalf("the topic holds %d messages after rejected enqueues, want 0", end[0])
	}
}

func TestUnknownQueue(t *testing.T) {
	topic := uniqueName("jobs")
	c := newCluster(t, 1, topic)
	b, err := NewBackend(c.config(uniqueName("g"), topic))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	want := fmt.Sprintf(`kafkaqueue: unknown queue: "other" is not in Config.Topics [%q]`, topic)
	for _, q := range []string{"other"} {
		if _, err := b.Claim(ctx, queue.ClaimParams{Queue: q, Limit: 1}); err == nil || err.Error() != want || !errors.Is(err, ErrUnknownQueue) {
			t.Fatalf("Claim(%q) = %v, want %q", q, err, want)
		}
		if _, err := b.Wake(ctx, q); err == nil || err.Error() != want {
			t.Fatalf("Wake(%q) = %v, want %q", q, err, want)
		}
	}
	// The retry topic is consumed for its queue, not claimed from by name.
	if _, err := b.Claim(ctx, queue.ClaimParams{Queue: topic + ".retry", Limit: 1}); !errors.Is(err, ErrUnknownQueue) {
		t.Fatalf("Claim(%s.retry) = %v, want ErrUnknownQueue", topic, err)
	}
	if _, err := b.Finish(ctx, []queue.Finish{{Lease: queue.Lease{ID: 1, Fence: 1}, Outcome: 0}}); err == nil ||
		err.Error() != "kafkaqueue: finish job 1: unknown outcome 0" {
		t.Fatalf("Finish with outcome 0 = %v", err)
	}
	b.Close()
	if _, err := b.Claim(ctx, queue.ClaimParams{Queue: topic, Limit: 1}); !errors.Is(err, queue.ErrClosed) {
		t.Fatalf("Claim after Close = %v, want ErrClosed", err)
	}
}

func TestMissingTopics(t *testing.T) {
	if os.Getenv("KAFKA_BROKERS") != "" {
		t.Skip("a real broker may create topics on demand; this test runs on an in-process broker that does not")
	}
	topic := uniqueName("jobs")
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topic, topic+".retry"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, err := NewBackend(Config{Brokers: c.ListenAddrs(), GroupID: "g", Topics: []string{topic}, Logger: quietLogger()})
	if err == nil {
		b.Close()
		t.Fatal("NewBackend accepted a queue without a dead-letter topic")
	}
	want := fmt.Sprintf(`kafkaqueue: topic does not exist: "%s.dlq" (every queue T needs T, T.retry and T.dlq)`, topic)
	if err.Error() != want || !errors.Is(err, ErrMissingTopic) {
		t.Fatalf("NewBackend = %v, want %q", err, want)
	}
}
