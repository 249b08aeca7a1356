package kafkaqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/jobfence/jobfence/queue"
)

// ErrUniqueKeyUnsupported reports an enqueue with EnqueueParams.UniqueKey or
// Unique set:
// Kafka cannot refuse a duplicate message, so the job is not written. Make the
// handler idempotent with Job.IdempotencyKey instead, or use pgqueue.
var ErrUniqueKeyUnsupported = errors.New("kafkaqueue: EnqueueParams.UniqueKey and Unique are not supported: Kafka cannot refuse a duplicate message; make the handler idempotent on Job.IdempotencyKey()")

// ErrTagsUnsupported reports an enqueue with EnqueueParams.Tags set: the
// Kafka backend keeps no job to list or search by them.
var ErrTagsUnsupported = errors.New("kafkaqueue: EnqueueParams.Tags is not supported: the Kafka backend keeps no jobs to search by tag")

// ErrEncryptionUnsupported reports an enqueue that asks for its args to
// be encrypted (EnqueueParams.Encrypt, an args type implementing
// queue.EncryptedArgs): the Kafka backend does not encrypt messages, and
// refuses rather than send the args in clear.
var ErrEncryptionUnsupported = fmt.Errorf("kafkaqueue: EnqueueParams.Encrypt is not supported: the Kafka backend does not encrypt messages; %w", queue.ErrEncryptionKey)

// ErrLimitsUnsupported reports an enqueue with EnqueueParams.LimitKey set:
// the Kafka backend has no concurrency limits, rate limits or sequences
// (pgqueue's Limit), so the job is not written rather than run unlimited.
// Per-key order is the partition's: give the jobs of a sequence the same
// EnqueueOptions.PartitionKey, and one member works them one at a time, in order.
var ErrLimitsUnsupported = errors.New("kafkaqueue: EnqueueParams.LimitKey is not supported: the Kafka backend has no limits; for jobs in order per key, give them the same EnqueueOptions.PartitionKey, whose partition one member works in order")

// EnqueueOptions are the Kafka-specific parts of an enqueue.
type EnqueueOptions struct {
	// PartitionKey becomes the message key: jobs with the same key go to
	// the same partition and run one at a time in the order they were
	// enqueued (see the package documentation for what retries do to that
	// order). Empty spreads jobs over the partitions round-robin, with no
	// order between them.
	PartitionKey string
}

// EnqueueJob is one job of an EnqueueMany.
type EnqueueJob struct {
	Params       queue.EnqueueParams
	PartitionKey string
}

// Client writes jobs to topics. It is safe for concurrent use.
type Client struct {
	cfg Config
	p   *producer
}

// NewClient returns a Client for the brokers in cfg. It does not connect
// until the first enqueue.
func NewClient(cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validateClient(); err != nil {
		return nil, err
	}
	return &Client{cfg: cfg, p: newProducer(cfg)}, nil
}

// Enqueue writes one job to the topic p.Queue and returns once the brokers
// have it. p.Priority is checked but has no effect: a partition runs in
// offset order. opts may give a partition key.
func (c *Client) Enqueue(ctx context.Context, p queue.EnqueueParams, opts ...EnqueueOptions) error {
	var o EnqueueOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	return c.EnqueueMany(ctx, []EnqueueJob{{Params: p, PartitionKey: o.PartitionKey}})
}

// Insert encodes args as JSON and enqueues a job of kind args.Kind() with
// opts applied (opts may be nil; opts.Queue is the topic), like pgqueue's
// Insert. eopts may give a partition key.
func (c *Client) Insert(ctx context.Context, args queue.Args, opts *queue.InsertOpts, eopts ...EnqueueOptions) error {
	p, err := queue.Params(args, opts)
	if err != nil {
		return err
	}
	return c.Enqueue(ctx, p, eopts...)
}

// EnqueueMany writes jobs in batches and returns once the brokers have all
// of them. It checks every job before it writes any: a bad job's error names
// its index and nothing is written. On a write error some jobs may have been
// written; the error is a kafka.WriteErrors when kafka-go reports which.
func (c *Client) EnqueueMany(ctx context.Context, jobs []EnqueueJob) error {
	if c.cfg.InsertHook == nil {
		return c.enqueueMany(ctx, jobs, nil)
	}
	ps := make([]queue.EnqueueParams, len(jobs))
	for i, j := range jobs {
		ps[i] = j.Params
	}
	_, err := queue.Observe(ctx, c.cfg.InsertHook, ps, func(ctx context.Context, meta map[string]string) (int64, error) {
		if err := c.enqueueMany(ctx, jobs, meta); err != nil {
			return 0, err
		}
		return int64(len(jobs)), nil
	})
	return err
}

func (c *Client) enqueueMany(ctx context.Context, jobs []EnqueueJob, meta map[string]string) error {
	msgs := make([]kafka.Message, len(jobs))
	now := time.Now()
	for i, j := range jobs {
		m, err := newMessage(j, meta, now)
		if err != nil {
			if len(jobs) == 1 {
				return err
			}
			return fmt.Errorf("kafkaqueue: job %d: %w", i, err)
		}
		msgs[i] = m
	}
	if len(msgs) == 0 {
		return nil
	}
	if err := c.p.write(ctx, msgs...); err != nil {
		return fmt.Errorf("kafkaqueue: enqueue: %w", err)
	}
	return nil
}

// Close waits for the enqueues in flight, then flushes and closes the
// producer. Enqueues that start after Close return an error wrapping
// queue.ErrClosed.
func (c *Client) Close() error {
	if err := c.p.close(); err != nil {
		return fmt.Errorf("kafkaqueue: close producer: %w", err)
	}
	return nil
}

func newMessage(j EnqueueJob, meta map[string]string, now time.Time) (kafka.Message, error) {
	p := j.Params.WithDefaults()
	if err := p.Validate(); err != nil {
		return kafka.Message{}, err
	}
	if p.UniqueKey != "" || p.Unique != nil {
		return kafka.Message{}, ErrUniqueKeyUnsupported
	}
	if p.LimitKey != "" {
		return kafka.Message{}, ErrLimitsUnsupported
	}
	if p.Encrypt {
		return kafka.Message{}, ErrEncryptionUnsupported
	}
	if len(p.Tags) > 0 {
		return kafka.Message{}, ErrTagsUnsupported
	}
	if !json.Valid(p.Args) {
		return kafka.Message{}, &queue.InvalidParamsError{Field: "Args", Reason: "is not valid JSON"}
	}
	m := kafka.Message{
		Topic: p.Queue,
		Value: p.Args,
		Headers: []kafka.Header{
			header(HeaderKind, p.Kind),
			header(HeaderMaxAttempts, strconv.Itoa(p.MaxAttempts)),
		},
	}
	m.Headers = limitHeaders(m.Headers, p.Deadline, p.Timeout)
	if md := queue.MergeMetadata(p.Metadata, meta); len(md) > 0 {
		hs, err := metadataHeaders(md)
		if err != nil {
			return kafka.Message{}, err
		}
		m.Headers = append(m.Headers, hs...)
	}
	if j.PartitionKey != "" {
		m.Key = []byte(j.PartitionKey)
	}
	if p.ScheduledAt.After(now) {
		m.Headers = append(m.Headers, header(HeaderNotBefore, p.ScheduledAt.UTC().Format(time.RFC3339Nano)))
	}
	return m, nil
}
