package kafkaqueue

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
)

// errorLog counts the Error records the backend logs per "key" attribute,
// and passes every record on to quietLogger's handler.
type errorLog struct {
	next slog.Handler
	mu   *sync.Mutex
	n    map[string]int
}

func newErrorLog() *errorLog {
	return &errorLog{next: quietLogger().Handler(), mu: new(sync.Mutex), n: map[string]int{}}
}

func (h *errorLog) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelError || h.next.Enabled(ctx, l)
}

func (h *errorLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "key" {
				h.mu.Lock()
				h.n[a.Value.String()]++
				h.mu.Unlock()
			}
			return true
		})
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *errorLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &errorLog{next: h.next.WithAttrs(as), mu: h.mu, n: h.n}
}

func (h *errorLog) WithGroup(name string) slog.Handler {
	return &errorLog{next: h.next.WithGroup(name), mu: h.mu, n: h.n}
}

func (h *errorLog) count(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[key]
}

// setMaxMessageBytes sets the max.message.bytes of topic on the broker.
func setMaxMessageBytes(t testing.TB, c *testCluster, topic string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := &kafka.Client{Addr: kafka.TCP(c.Brokers...)}
	res, err := cl.IncrementalAlterConfigs(ctx, &kafka.IncrementalAlterConfigsRequest{
		Resources: []kafka.IncrementalAlterConfigsRequestResource{{
			ResourceType: kafka.ResourceTypeTopic,
			ResourceName: topic,
			Configs: []kafka.IncrementalAlterConfigsRequestConfig{{
				Name: "max.message.bytes", Value: strconv.Itoa(n), ConfigOperation: kafka.ConfigOperationSet,
			}},
		}},
	})
	if err != nil {
		t.Fatalf("set max.message.bytes of %s: %v", topic, err)
	}
	for _, r := range res.Resources {
		if r.Error != nil {
			t.Fatalf("set max.message.bytes of %s: %v", topic, r.Error)
		}
	}
}

// TestHandOffWriteFailureRetriesTheWrite shows that a retry or dead-letter
// copy the broker refuses is written again, not run again: the handler runs
// once, every failed round is logged at Error with the job's key, and the
// copy lands once the topic takes it. A copy too large only because of its
// error history lands at once without it.
func TestHandOffWriteFailureRetriesTheWrite(t *testing.T) {
	tests := []struct {
		name    string
		args    int    // bytes of the job's args
		trace   int    // bytes of the error's stack trace
		limited string // the suffix of the topic whose max.message.bytes is 1000 at first
		finish  queue.Outcome
		raise   bool // the write fails until the test raises the topic's limit
	}{
		{name: "dead letter too large until the topic takes it", args: 4000, limited: DefaultDeadLetterTopicSuffix,
			finish: queue.OutcomeDiscard, raise: true},
		{name: "retry copy too large until the topic takes it", args: 4000, limited: DefaultRetryTopicSuffix,
			finish: queue.OutcomeRetry, raise: true},
		{name: "dead letter fits without its error history", args: 10, trace: 8000, limited: DefaultDeadLetterTopicSuffix,
			finish: queue.OutcomeDiscard},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			topic := uniqueName("jobs")
			c := newCluster(t, 1, topic)
			setMaxMessageBytes(t, c, topic+tt.limited, 1000)
			cl := newTestClient(t, c)
			ctx := context.Background()
			if err := cl.Enqueue(ctx, queue.EnqueueParams{Queue: topic, Kind: "k", Args: paddedArgs(tt.args), MaxAttempts: 5},
				EnqueueOptions{PartitionKey: "p"}); err != nil {
				t.Fatal(err)
			}
			group := uniqueName("g")
			cfg := c.config(group, topic)
			cfg.InPlaceRetries = -1
			cfg.RetryDelay = 100 * time.Millisecond
			logs := newErrorLog()
			cfg.Logger = slog.New(logs)

			var mu sync.Mutex
			runs := map[int]int{} // attempt -> runs
			var key string
			m := startMember(t, "m1", cfg, topic, 1, func(ctx context.Context, j *queue.Job) queue.Finish {
				mu.Lock()
				defer mu.Unlock()
				runs[j.Attempt]++
				key = j.Key
				if j.Attempt > 1 {
					return queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeComplete}
				}
				return queue.Finish{Lease: j.Lease(), Outcome: tt.finish,
					Error: &queue.AttemptError{Error: "failed", Trace: strings.Repeat("t", tt.trace)}}
			})
			if tt.raise {
				testwatch.WaitFor(t, time.Minute, "three failed writes logged with the job's key", func() bool {
					m.checkErrs(t)
					mu.Lock()
					k, n := key, runs[1]
					mu.Unlock()
					if n > 1 {
						t.Fatalf("attempt 1 ran %d times while its copy could not be written, want once", n)
					}
					return k != "" && logs.count(k) >= 3
				})
				mu.Lock()
				if runs[1] != 1 {
					t.Fatalf("attempt 1 ran %d times while its copy could not be written, want once", runs[1])
				}
				mu.Unlock()
				setMaxMessageBytes(t, c, topic+tt.limited, 1<<20)
			}
			if tt.finish == queue.OutcomeRetry {
				testwatch.WaitFor(t, time.Minute, "the job to run from the retry topic", func() bool {
					m.checkErrs(t)
					mu.Lock()
					defer mu.Unlock()
					return runs[2] > 0
				})
			} else {
				dead := readAll(t, c, topic+DefaultDeadLetterTopicSuffix, 1, 1)
				if v, _ := Header(dead[0], HeaderError); v != "failed" {
					t.Fatalf("dead letter HeaderError = %q, want %q", v, "failed")
				}
				if v, ok := Header(dead[0], HeaderErrors); ok {
					t.Fatalf("dead letter has HeaderErrors %.100q, want it left out of a copy too large with it", v)
				}
			}
			waitCommitted(t, c, group, topic, 1)
			m.checkErrs(t)
			end, err := endOffsets(ctx, c.Brokers, topic+DefaultDeadLetterTopicSuffix, 1)
			if err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int64{true: 1}[tt.finish != queue.OutcomeRetry]; end[0] != want {
				t.Fatalf("dead-letter topic holds %d messages, want %d", end[0], want)
			}
			mu.Lock()
			defer mu.Unlock()
			if runs[1] != 1 || runs[2] > 1 {
				t.Fatalf("attempts ran %v times, want attempt 1 once (and attempt 2 at most once)", runs)
			}
			if !tt.raise && logs.count(key) != 0 {
				t.Fatalf("%d failed writes logged for a copy that fits without its error history", logs.count(key))
			}
		})
	}
}

// TestHandOffPartialWriteRetriesOnlyTheFailed shows that when one Finish
// hands off two copies and only one is written, only the other is written
// again: the written dead letter exists once.
func TestHandOffPartialWriteRetriesOnlyTheFailed(t *testing.T) {
	topic := uniqueName("jobs")
	c := newCluster(t, 1, topic)
	setMaxMessageBytes(t, c, topic+DefaultRetryTopicSuffix, 1000)
	cl := newTestClient(t, c)
	ctx := context.Background()
	if err := cl.EnqueueMany(ctx, []EnqueueJob{
		{Params: queue.EnqueueParams{Queue: topic, Kind: "discarded"}, PartitionKey: "a"},
		{Params: queue.EnqueueParams{Queue: topic, Kind: "retried", Args: paddedArgs(4000)}, PartitionKey: "b"},
	}); err != nil {
		t.Fatal(err)
	}
	group := uniqueName("g")
	cfg := c.config(group, topic)
	cfg.InPlaceRetries = -1
	cfg.RetryDelay = 100 * time.Millisecond
	cfg.ConcurrencyPerPartition = 2
	logs := newErrorLog()
	cfg.Logger = slog.New(logs)
	b, err := NewBackend(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	jobs := claimN(t, b, topic, 2, time.Minute)
	fs := make([]queue.Finish, len(jobs))
	var retried string
	for i, j := range jobs {
		fs[i] = queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeDiscard, Error: &queue.AttemptError{Error: "bad"}}
		if j.Kind == "retried" {
			fs[i].Outcome = queue.OutcomeRetry
			retried = j.Key
		}
	}
	if stale, err := b.Finish(ctx, fs); err != nil || len(stale) != 0 {
		t.Fatalf("Finish = %v, %v", stale, err)
	}
	testwatch.WaitFor(t, time.Minute, "two failed writes of the retry copy logged", func() bool { return logs.count(retried) >= 2 })
	setMaxMessageBytes(t, c, topic+DefaultRetryTopicSuffix, 1<<20)

	again := claimN(t, b, topic, 1, time.Minute)
	if again[0].Kind != "retried" || again[0].Attempt != 2 {
		t.Fatalf("claimed %s attempt %d, want the retried job's attempt 2 from the retry topic", again[0].Kind, again[0].Attempt)
	}
	if stale, err := b.Finish(ctx, []queue.Finish{{Lease: again[0].Lease(), Outcome: queue.OutcomeComplete}}); err != nil || len(stale) != 0 {
		t.Fatalf("Finish = %v, %v", stale, err)
	}
	waitCommitted(t, c, group, topic, 1)
	waitCommitted(t, c, group, topic+DefaultRetryTopicSuffix, 1)
	for _, tc := range []struct {
		topic string
		want  int64
	}{{topic + DefaultDeadLetterTopicSuffix, 1}, {topic + DefaultRetryTopicSuffix, 1}} {
		end, err := endOffsets(ctx, c.Brokers, tc.topic, 1)
		if err != nil {
			t.Fatal(err)
		}
		if end[0] != tc.want {
			t.Errorf("%s holds %d messages, want %d", tc.topic, end[0], tc.want)
		}
	}
}
