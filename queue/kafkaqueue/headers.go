package kafkaqueue

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/jobfence/jobfence/queue"
)

// The message headers jobfence reads and writes. A message without a Kind
// header is delivered with an empty kind, which a worker rejects as unknown.
const (
	// HeaderKind names the job's handler.
	HeaderKind = "jobfence-kind"
	// HeaderMaxAttempts is the job's attempt budget.
	HeaderMaxAttempts = "jobfence-max-attempts"
	// HeaderAttempt counts the attempts already made before this message.
	HeaderAttempt = "jobfence-attempt"
	// HeaderNotBefore is when the job may run, RFC 3339 with nanoseconds.
	HeaderNotBefore = "jobfence-not-before"
	// HeaderOrigin is where the job was first enqueued, as
	// "topic/partition/offset"; set on retry and dead-letter messages.
	HeaderOrigin = "jobfence-origin"
	// HeaderQueue is the queue (main topic) the job belongs to; set on retry
	// and dead-letter messages.
	HeaderQueue = "jobfence-queue"
	// HeaderError is the last attempt's error text (retry and dead-letter
	// messages).
	HeaderError = "jobfence-error"
	// HeaderErrors is the JSON array of all attempts' queue.AttemptError.
	// It is left out of a copy that its topic refuses as too large with it.
	HeaderErrors = "jobfence-errors"
	// HeaderOutcome is why a job reached the dead-letter topic: "retry"
	// (attempts exhausted), "discard" or "cancel".
	HeaderOutcome = "jobfence-outcome"
	// HeaderDeadline is the job's EnqueueParams.Deadline, RFC 3339 with
	// nanoseconds; the worker keeps it (Job.Deadline).
	HeaderDeadline = "jobfence-deadline"
	// HeaderTimeout is the job's EnqueueParams.Timeout, as Go's
	// time.Duration prints it ("-1ns": no timeout).
	HeaderTimeout = "jobfence-timeout"
)

// Origin is where a job's message was first written. It stays the same when
// the job moves through the retry topic, so it names the job for good.
type Origin struct {
	Topic     string
	Partition int
	Offset    int64
}

// String formats o as "topic/partition/offset", the HeaderOrigin value.
func (o Origin) String() string {
	return o.Topic + "/" + strconv.Itoa(o.Partition) + "/" + strconv.FormatInt(o.Offset, 10)
}

// Key returns the job's idempotency key, "kafka:<topic>:<partition>:<offset>".
func (o Origin) Key() string {
	return "kafka:" + o.Topic + ":" + strconv.Itoa(o.Partition) + ":" + strconv.FormatInt(o.Offset, 10)
}

// ParseOrigin parses a HeaderOrigin value.
func ParseOrigin(s string) (Origin, error) {
	i := strings.LastIndexByte(s, '/')
	j := -1
	if i > 0 {
		j = strings.LastIndexByte(s[:i], '/')
	}
	if j <= 0 {
		return Origin{}, fmt.Errorf("kafkaqueue: origin %q: want topic/partition/offset", s)
	}
	p, err := strconv.Atoi(s[j+1 : i])
	if err != nil {
		return Origin{}, fmt.Errorf("kafkaqueue: origin %q: partition: %w", s, err)
	}
	off, err := strconv.ParseInt(s[i+1:], 10, 64)
	if err != nil {
		return Origin{}, fmt.Errorf("kafkaqueue: origin %q: offset: %w", s, err)
	}
	return Origin{Topic: s[:j], Partition: p, Offset: off}, nil
}

// reservedPrefix starts every header jobfence reads; other headers are the
// job's metadata (a W3C "traceparent" header among them, where other Kafka
// instrumentation looks for it too).
const reservedPrefix = "jobfence-"

// metadataHeaders returns m as headers.
func metadataHeaders(m map[string]string) ([]kafka.Header, error) {
	hs := make([]kafka.Header, 0, len(m))
	for k, v := range m {
		if strings.HasPrefix(k, reservedPrefix) || k == "" {
			return nil, &queue.InvalidParamsError{Field: "Metadata", Reason: fmt.Sprintf("key %q is empty or starts with %q, which jobfence reserves", k, reservedPrefix)}
		}
		hs = append(hs, header(k, v))
	}
	return hs, nil
}

// meta is what the headers of one message say.
type meta struct {
	kind        string
	maxAttempts int
	attempt     int
	notBefore   time.Time
	deadline    time.Time
	timeout     time.Duration
	origin      Origin
	hasOrigin   bool
	queue       string
	errors      []queue.AttemptError
	// metadata holds the headers jobfence does not reserve.
	metadata map[string]string
}

func parseMeta(hs []kafka.Header) meta {
	m := meta{maxAttempts: queue.DefaultMaxAttempts}
	for _, h := range hs {
		v := string(h.Value)
		switch h.Key {
		case HeaderKind:
			m.kind = v
		case HeaderMaxAttempts:
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				m.maxAttempts = n
			}
		case HeaderAttempt:
			if n, err := strconv.Atoi(v); err == nil && n >= 0 {
				m.attempt = n
			}
		case HeaderNotBefore:
			if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
				m.notBefore = t
			}
		case HeaderDeadline:
			if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
				m.deadline = t
			}
		case HeaderTimeout:
			if d, err := time.ParseDuration(v); err == nil {
				m.timeout = d
			}
		case HeaderOrigin:
			if o, err := ParseOrigin(v); err == nil {
				m.origin, m.hasOrigin = o, true
			}
		case HeaderQueue:
			m.queue = v
		case HeaderErrors:
			_ = json.Unmarshal(h.Value, &m.errors)
		default:
			if !strings.HasPrefix(h.Key, reservedPrefix) {
				if m.metadata == nil {
					m.metadata = map[string]string{}
				}
				m.metadata[h.Key] = v
			}
		}
	}
	return m
}

func header(k, v string) kafka.Header { return kafka.Header{Key: k, Value: []byte(v)} }

// limitHeaders returns the headers of a job's deadline and timeout, none
// for those it has not.
func limitHeaders(hs []kafka.Header, deadline time.Time, timeout time.Duration) []kafka.Header {
	if !deadline.IsZero() {
		hs = append(hs, header(HeaderDeadline, deadline.UTC().Format(time.RFC3339Nano)))
	}
	if timeout != 0 {
		hs = append(hs, header(HeaderTimeout, timeout.String()))
	}
	return hs
}

// Header returns the value of the last header named key, and whether there
// is one. Use it to read the headers of a dead-letter message.
func Header(m kafka.Message, key string) (string, bool) {
	for i := len(m.Headers) - 1; i >= 0; i-- {
		if m.Headers[i].Key == key {
			return string(m.Headers[i].Value), true
		}
	}
	return "", false
}
