package kafkaqueue

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/jobfence/jobfence/queue"
)

// Defaults applied to zero fields of Config.
const (
	DefaultRetryTopicSuffix        = ".retry"
	DefaultDeadLetterTopicSuffix   = ".dlq"
	DefaultConcurrencyPerPartition = 1
	DefaultMaxBufferedPerPartition = 1000
	DefaultInPlaceRetries          = 2
	DefaultRetryDelay              = 5 * time.Second
	DefaultHeartbeatInterval       = time.Second
	DefaultJoinGroupBackoff        = time.Second
	DefaultCommitInterval          = time.Second
	DefaultMaxWait                 = 500 * time.Millisecond
	DefaultBatchTimeout            = 2 * time.Millisecond
)

// Config configures a Client and a Backend. A Client needs only Brokers (and
// Dialer when the cluster needs TLS or SASL); a Backend also needs GroupID and
// Topics.
type Config struct {
	// Brokers lists the bootstrap brokers as host:port; required.
	Brokers []string
	// GroupID is the consumer group of the worker fleet; required for a
	// Backend. Every instance of the fleet uses the same GroupID.
	GroupID string
	// Topics are the queues the Backend consumes: a worker's queue name is
	// the topic name. For each topic T the Backend also consumes T's retry
	// topic and produces to its dead-letter topic. Required for a Backend.
	Topics []string
	// RetryTopicSuffix names the retry topic of T as T+RetryTopicSuffix.
	// Default ".retry".
	RetryTopicSuffix string
	// DeadLetterTopicSuffix names the dead-letter topic of T as
	// T+DeadLetterTopicSuffix. Default ".dlq".
	DeadLetterTopicSuffix string

	// ConcurrencyPerPartition caps the jobs of one partition that run at
	// once. Jobs with the same partition key never run at once whatever the
	// value: a job waits for the earlier jobs of its key. Default 1.
	ConcurrencyPerPartition int
	// MaxBufferedPerPartition caps the fetched but unfinished messages held
	// per partition; fetching pauses at the cap. Default 1000, and at least
	// ConcurrencyPerPartition.
	MaxBufferedPerPartition int
	// InPlaceRetries is how many times a failed job is run again in its
	// partition (after the backoff the worker asks for) before it moves to
	// the retry topic. Zero means DefaultInPlaceRetries (2); negative means
	// none. In-place attempts are counted in memory only: when the group
	// rebalances before they run out, the next owner starts again from the
	// count in the message's headers, so in a group that rebalances more
	// often than that an always-failing job may never reach the retry or
	// dead-letter topic. Fewer in-place retries make that less likely.
	InPlaceRetries int
	// RetryDelay is the least time a job waits in the retry topic. Default 5s.
	RetryDelay time.Duration

	// Dialer opens every connection (consumer group, fetches, metadata,
	// produces); set its TLS and SASLMechanism for a secured cluster. The
	// producer's kafka.Transport takes its TLS, SASLMechanism, ClientID,
	// DialFunc and Timeout. Default: a plain TCP dialer.
	Dialer *kafka.Dialer
	// HeartbeatInterval is how often the member heartbeats to the group
	// coordinator, which is also how soon it learns of a rebalance and
	// cancels the jobs of revoked partitions. Default 1s.
	HeartbeatInterval time.Duration
	// SessionTimeout is how long the coordinator waits without a heartbeat
	// before it evicts the member. Zero means kafka-go's default (30s).
	SessionTimeout time.Duration
	// RebalanceTimeout is how long the coordinator waits for members to
	// rejoin during a rebalance. Zero means kafka-go's default (30s).
	RebalanceTimeout time.Duration
	// JoinGroupBackoff is the wait before joining again after a failed join.
	// Default 1s.
	JoinGroupBackoff time.Duration
	// StartOffset is where a partition without a committed offset starts:
	// kafka.FirstOffset (the default) or kafka.LastOffset.
	StartOffset int64
	// CommitInterval is how often offsets are committed when no Finish asks
	// for it, retrying a commit that failed. Default 1s.
	CommitInterval time.Duration
	// SyncCommit makes Finish wait until the offsets it advanced are
	// committed, and report its leases stale when the broker refuses the
	// commit because the generation ended. A commit that fails for another
	// reason is logged and retried by the background committer; Finish
	// still returns no error, as its outcomes are applied. By default Finish
	// returns once the outcome is applied locally and a background committer
	// commits at once (one commit in flight, covering everything finished
	// before it); a refused commit then ends the generation locally,
	// cancelling its running jobs. Either way an offset is committed only
	// after the effects of the messages before it are done.
	SyncCommit bool
	// MaxWait bounds how long one fetch waits for new messages. Default
	// 500ms.
	MaxWait time.Duration

	// BatchTimeout is how long the producer waits to fill a batch. Default
	// 2ms.
	BatchTimeout time.Duration

	// Logger receives the backend's logs; kafka-go's own error logs go to it
	// at debug level. Default slog.Default().
	Logger *slog.Logger
	// InsertHook, when set, observes every enqueue of a Client (Enqueue,
	// Insert, EnqueueMany) and may add metadata to its jobs, which travel as
	// message headers; see queue.InsertHook. kafkatelemetry.Instrument sets it.
	InsertHook queue.InsertHook
}

// ConfigError reports a Config field that is not valid.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("kafkaqueue: invalid config: %s %s", e.Field, e.Reason)
}

func (c Config) withDefaults() Config {
	if c.RetryTopicSuffix == "" {
		c.RetryTopicSuffix = DefaultRetryTopicSuffix
	}
	if c.DeadLetterTopicSuffix == "" {
		c.DeadLetterTopicSuffix = DefaultDeadLetterTopicSuffix
	}
	if c.ConcurrencyPerPartition == 0 {
		c.ConcurrencyPerPartition = DefaultConcurrencyPerPartition
	}
	if c.MaxBufferedPerPartition == 0 {
		c.MaxBufferedPerPartition = DefaultMaxBufferedPerPartition
	}
	if c.MaxBufferedPerPartition < c.ConcurrencyPerPartition {
		c.MaxBufferedPerPartition = c.ConcurrencyPerPartition
	}
	switch {
	case c.InPlaceRetries == 0:
		c.InPlaceRetries = DefaultInPlaceRetries
	case c.InPlaceRetries < 0:
		c.InPlaceRetries = 0
	}
	if c.RetryDelay == 0 {
		c.RetryDelay = DefaultRetryDelay
	}
	if c.Dialer == nil {
		c.Dialer = &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true}
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.JoinGroupBackoff == 0 {
		c.JoinGroupBackoff = DefaultJoinGroupBackoff
	}
	if c.StartOffset == 0 {
		c.StartOffset = kafka.FirstOffset
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = DefaultCommitInterval
	}
	if c.MaxWait == 0 {
		c.MaxWait = DefaultMaxWait
	}
	if c.BatchTimeout == 0 {
		c.BatchTimeout = DefaultBatchTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validateClient() error {
	if len(c.Brokers) == 0 {
		return &ConfigError{Field: "Brokers", Reason: "is empty"}
	}
	for _, b := range c.Brokers {
		if b == "" {
			return &ConfigError{Field: "Brokers", Reason: "has an empty address"}
		}
	}
	return nil
}

func (c Config) validateBackend() error {
	if err := c.validateClient(); err != nil {
		return err
	}
	switch {
	case c.GroupID == "":
		return &ConfigError{Field: "GroupID", Reason: "is empty"}
	case len(c.Topics) == 0:
		return &ConfigError{Field: "Topics", Reason: "is empty"}
	case c.ConcurrencyPerPartition < 0:
		return &ConfigError{Field: "ConcurrencyPerPartition", Reason: "is negative"}
	case c.MaxBufferedPerPartition < 0:
		return &ConfigError{Field: "MaxBufferedPerPartition", Reason: "is negative"}
	case c.RetryDelay < 0:
		return &ConfigError{Field: "RetryDelay", Reason: "is negative"}
	case c.StartOffset != kafka.FirstOffset && c.StartOffset != kafka.LastOffset:
		return &ConfigError{Field: "StartOffset", Reason: "must be kafka.FirstOffset or kafka.LastOffset"}
	case c.RetryTopicSuffix == c.DeadLetterTopicSuffix:
		return &ConfigError{Field: "DeadLetterTopicSuffix", Reason: "must differ from RetryTopicSuffix"}
	}
	seen := make(map[string]bool, len(c.Topics))
	for _, t := range c.Topics {
		switch {
		case t == "":
			return &ConfigError{Field: "Topics", Reason: "has an empty topic"}
		case seen[t]:
			return &ConfigError{Field: "Topics", Reason: fmt.Sprintf("lists %q twice", t)}
		}
		seen[t] = true
	}
	return nil
}

// RetryTopic returns the retry topic of topic under c.
func (c Config) RetryTopic(topic string) string {
	return topic + c.withDefaults().RetryTopicSuffix
}

// DeadLetterTopic returns the dead-letter topic of topic under c.
func (c Config) DeadLetterTopic(topic string) string {
	return topic + c.withDefaults().DeadLetterTopicSuffix
}

// kafkaLogger adapts slog to kafka-go's Logger at debug level.
type kafkaLogger struct{ l *slog.Logger }

func (k kafkaLogger) Printf(format string, args ...any) {
	k.l.Debug(fmt.Sprintf(format, args...), "source", "kafka-go")
}

// adminClient returns a kafka-go Client for metadata and offset requests,
// connecting the way c.Dialer does.
func (c Config) adminClient() *kafka.Client {
	return &kafka.Client{Addr: kafka.TCP(c.Brokers...), Transport: c.transport(), Timeout: 10 * time.Second}
}

// readerConfig is what the package's readers of topic share: c's brokers,
// dialer and logger, fetches of up to 10 MiB that wait at most MaxWait, and
// no lag polling (nothing reads it).
func (c Config) readerConfig(topic string) kafka.ReaderConfig {
	return kafka.ReaderConfig{
		Brokers:         c.Brokers,
		Topic:           topic,
		Dialer:          c.Dialer,
		MinBytes:        1,
		MaxBytes:        10 << 20,
		MaxWait:         c.MaxWait,
		ReadLagInterval: -1,
		ErrorLogger:     kafkaLogger{c.Logger},
	}
}

// transport returns a kafka-go Transport that connects the way c.Dialer does.
func (c Config) transport() *kafka.Transport {
	d := c.Dialer
	t := &kafka.Transport{
		Dial:     d.DialFunc,
		ClientID: d.ClientID,
		TLS:      d.TLS,
		SASL:     d.SASLMechanism,
	}
	if d.Timeout > 0 {
		t.DialTimeout = d.Timeout
	}
	return t
}
