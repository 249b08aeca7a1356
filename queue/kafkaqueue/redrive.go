package kafkaqueue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
)

// RedriveOptions configures Client.Redrive.
type RedriveOptions struct {
	// GroupID is the consumer group whose committed offsets on the
	// dead-letter topic mark the dead letters already moved back, so that
	// the next call moves only newer ones. Default "jobfence-redrive." plus
	// the queue. Run one Redrive per group at a time.
	GroupID string
	// Max caps how many dead letters one call moves; zero moves every dead
	// letter that was in the topic when the call began.
	Max int
}

// Redrive moves the dead letters of queue back to its retry topic, where
// the queue's workers run them again at once. It is the Kafka counterpart of
// pgqueue's Client.Retry, for the jobs whose handler was fixed after they
// failed for good.
//
// A moved job keeps its origin, so its idempotency key, and with it any
// effect it already applied, stays the same. It keeps its attempt count and
// error history, and gets one more attempt if it had none left. Dead letters
// written after the call began are left for the next call.
//
// Each dead letter is committed in opts.GroupID after its copy is written.
// A call cut short by ctx or a failure returns how many it moved with the
// error; if it stopped between a write and its commit, the next call moves
// that one again, which the job's idempotency key absorbs.
func (c *Client) Redrive(ctx context.Context, queue string, opts RedriveOptions) (int, error) {
	if queue == "" {
		return 0, &ConfigError{Field: "queue", Reason: "is empty"}
	}
	if opts.Max < 0 {
		return 0, &ConfigError{Field: "RedriveOptions.Max", Reason: "is negative"}
	}
	group := opts.GroupID
	if group == "" {
		group = "jobfence-redrive." + queue
	}
	dlq := c.cfg.DeadLetterTopic(queue)
	ends, backlog, err := c.deadLetterBacklog(ctx, dlq, group)
	if err != nil {
		return 0, fmt.Errorf("kafkaqueue: redrive %s: %w", dlq, err)
	}
	if opts.Max > 0 && backlog > int64(opts.Max) {
		backlog = int64(opts.Max)
	}
	if backlog == 0 {
		return 0, nil
	}
	rc := c.cfg.readerConfig(dlq)
	rc.GroupID = group
	rc.HeartbeatInterval = c.cfg.HeartbeatInterval
	rc.SessionTimeout = c.cfg.SessionTimeout
	rc.RebalanceTimeout = c.cfg.RebalanceTimeout
	rc.JoinGroupBackoff = c.cfg.JoinGroupBackoff
	rc.StartOffset = kafka.FirstOffset
	r := kafka.NewReader(rc)
	defer r.Close()
	retryTopic := c.cfg.RetryTopic(queue)
	moved := 0
	for int64(moved) < backlog {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			return moved, fmt.Errorf("kafkaqueue: redrive %s: read: %w", dlq, err)
		}
		if m.Offset >= ends[m.Partition] {
			continue // dead after the call began: the next call's
		}
		if err := c.p.write(ctx, redriveCopy(m, queue, retryTopic, time.Now())); err != nil {
			return moved, fmt.Errorf("kafkaqueue: redrive %s: write %s/%d/%d: %w", dlq, m.Topic, m.Partition, m.Offset, err)
		}
		if err := r.CommitMessages(ctx, m); err != nil {
			return moved, fmt.Errorf("kafkaqueue: redrive %s: commit %s/%d/%d (its copy is written): %w", dlq, m.Topic, m.Partition, m.Offset, err)
		}
		moved++
	}
	c.cfg.Logger.Info("kafkaqueue: dead letters moved back", "queue", queue, "topic", dlq, "group", group, "moved", moved)
	return moved, nil
}

// deadLetterBacklog returns the end offset of each partition of topic and
// how many messages lie between group's committed offsets (or the start of
// the log) and those ends.
func (c *Client) deadLetterBacklog(ctx context.Context, topic, group string) (map[int]int64, int64, error) {
	cl := c.cfg.adminClient()
	md, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, 0, fmt.Errorf("read metadata: %w", err)
	}
	if len(md.Topics) != 1 || md.Topics[0].Error != nil || len(md.Topics[0].Partitions) == 0 {
		var terr error
		if len(md.Topics) == 1 {
			terr = md.Topics[0].Error
		}
		return nil, 0, errors.Join(fmt.Errorf("%w: %q", ErrMissingTopic, topic), terr)
	}
	var parts []int
	lreq := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for _, p := range md.Topics[0].Partitions {
		parts = append(parts, p.ID)
		lreq.Topics[topic] = append(lreq.Topics[topic], kafka.FirstOffsetOf(p.ID), kafka.LastOffsetOf(p.ID))
	}
	lres, err := cl.ListOffsets(ctx, lreq)
	if err != nil {
		return nil, 0, fmt.Errorf("list offsets: %w", err)
	}
	first, ends := map[int]int64{}, map[int]int64{}
	for _, po := range lres.Topics[topic] {
		if po.Error != nil {
			return nil, 0, fmt.Errorf("list offsets of partition %d: %w", po.Partition, po.Error)
		}
		first[po.Partition], ends[po.Partition] = po.FirstOffset, po.LastOffset
	}
	ores, err := cl.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: parts}})
	if err != nil {
		return nil, 0, fmt.Errorf("fetch the offsets of group %s: %w", group, err)
	}
	committed := map[int]int64{}
	switch {
	case errors.Is(ores.Error, kafka.GroupIdNotFound):
		// A group that never committed: some brokers say so rather than
		// answering with no offsets.
	case ores.Error != nil:
		return nil, 0, fmt.Errorf("fetch the offsets of group %s: %w", group, ores.Error)
	}
	for _, p := range ores.Topics[topic] {
		if p.Error != nil && !errors.Is(p.Error, kafka.GroupIdNotFound) {
			return nil, 0, fmt.Errorf("fetch the offset of group %s on partition %d: %w", group, p.Partition, p.Error)
		}
		if p.Error == nil {
			committed[p.Partition] = p.CommittedOffset
		}
	}
	var backlog int64
	for _, p := range parts {
		start := first[p] // no commit yet, or one older than the retention kept
		if off, ok := committed[p]; ok && off > start {
			start = off
		}
		if n := ends[p] - start; n > 0 {
			backlog += n
		}
	}
	return ends, backlog, nil
}

// redriveCopy is the retry-topic message of dead letter m of queue: ready
// now, with one more attempt if its budget is spent, and with its origin
// (the dead letter's own position if it has none, so that moving the same
// dead letter twice still gives one key).
func redriveCopy(m kafka.Message, queue, retryTopic string, now time.Time) kafka.Message {
	md := parseMeta(m.Headers)
	hs := make([]kafka.Header, 0, len(m.Headers)+4)
	for _, h := range m.Headers {
		switch h.Key {
		case HeaderOutcome, HeaderNotBefore, HeaderMaxAttempts, HeaderQueue:
			continue
		}
		hs = append(hs, h)
	}
	hs = append(hs,
		header(HeaderMaxAttempts, strconv.Itoa(max(md.maxAttempts, md.attempt+1))),
		header(HeaderQueue, queue),
		header(HeaderNotBefore, now.UTC().Format(time.RFC3339Nano)))
	if !md.hasOrigin {
		hs = append(hs, header(HeaderOrigin, Origin{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset}.String()))
	}
	return kafka.Message{Topic: retryTopic, Key: m.Key, Value: m.Value, Headers: hs}
}
