package kafkaqueue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
)

// TestRedriveMovesDeadLettersBack fails three jobs until they are dead
// letters, fixes the handler, and moves them back in two calls (Max, then
// the rest): each runs once more under its original idempotency key, with
// its attempts counted on and one more attempt granted, and a third call
// finds nothing left to move.
func TestRedriveMovesDeadLettersBack(t *testing.T) {
	topic := uniqueName("jobs")
	c := newCluster(t, 2, topic)
	cl := newTestClient(t, c)
	ctx := context.Background()
	for i := range 3 {
		if err := cl.Enqueue(ctx, queue.EnqueueParams{Queue: topic, Kind: "flaky", MaxAttempts: 2},
			EnqueueOptions{PartitionKey: fmt.Sprintf("k%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := c.config(uniqueName("g"), topic)
	cfg.InPlaceRetries = -1
	cfg.RetryDelay = 50 * time.Millisecond
	var broken atomic.Bool
	broken.Store(true)
	var mu sync.Mutex
	failedKeys := map[string]int{}
	done := map[string]*queue.Job{}
	runs := 0
	startMember(t, "m1", cfg, topic, 4, func(ctx context.Context, j *queue.Job) queue.Finish {
		mu.Lock()
		defer mu.Unlock()
		if broken.Load() {
			failedKeys[j.IdempotencyKey()]++
			return queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeRetry, Error: &queue.AttemptError{Error: "broken until fixed"}}
		}
		runs++
		done[j.IdempotencyKey()] = j
		return queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeComplete}
	})
	dlq := cfg.DeadLetterTopic(topic)
	deadLetters := func() int64 {
		ends, err := endOffsets(ctx, c.Brokers, dlq, 2)
		if err != nil {
			return -1
		}
		var n int64
		for _, e := range ends {
			n += e
		}
		return n
	}
	testwatch.WaitFor(t, time.Minute, "three dead letters", func() bool { return deadLetters() == 3 })
	broken.Store(false)

	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	group := uniqueName("redrive")
	opts := RedriveOptions{GroupID: group, Max: 2}
	if n, err := cl.Redrive(rctx, topic, opts); err != nil || n != 2 {
		t.Fatalf("Redrive(Max 2) = %d, %v; want 2 moved", n, err)
	}
	opts.Max = 0
	if n, err := cl.Redrive(rctx, topic, opts); err != nil || n != 1 {
		t.Fatalf("second Redrive = %d, %v; want the 1 left", n, err)
	}
	if n, err := cl.Redrive(rctx, topic, opts); err != nil || n != 0 {
		t.Fatalf("third Redrive = %d, %v; want 0: every dead letter was moved", n, err)
	}
	testwatch.WaitFor(t, time.Minute, "the three jobs to run again", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(done) == 3
	})
	waitCommitted(t, c, cfg.GroupID, cfg.RetryTopic(topic), 2)
	mu.Lock()
	defer mu.Unlock()
	if runs != 3 {
		t.Fatalf("%d successful runs for 3 re-driven jobs", runs)
	}
	for key, j := range done {
		if failedKeys[key] != 2 {
			t.Errorf("job %s ran again under a key that failed %d times; want its original key, failed twice", key, failedKeys[key])
		}
		if j.Attempt != 3 || j.MaxAttempts != 3 || len(j.Errors) != 2 {
			t.Errorf("re-driven job %s: attempt %d of %d with %d errors; want attempt 3 of 3 after 2 errors", key, j.Attempt, j.MaxAttempts, len(j.Errors))
		}
	}
}

// TestRedriveErrors shows the errors a user sees for a bad call; nothing is
// moved.
func TestRedriveErrors(t *testing.T) {
	topic := uniqueName("jobs")
	c := newCluster(t, 1, topic)
	cl := newTestClient(t, c)
	ctx := context.Background()
	var cerr *ConfigError
	if _, err := cl.Redrive(ctx, "", RedriveOptions{}); !errors.As(err, &cerr) {
		t.Errorf("Redrive of no queue = %v, want a *ConfigError", err)
	}
	if _, err := cl.Redrive(ctx, topic, RedriveOptions{Max: -1}); !errors.As(err, &cerr) {
		t.Errorf("Redrive with Max -1 = %v, want a *ConfigError", err)
	}
	if n, err := cl.Redrive(ctx, "no-such-queue", RedriveOptions{}); !errors.Is(err, ErrMissingTopic) || n != 0 {
		t.Errorf("Redrive of a queue without a dead-letter topic = %d, %v; want ErrMissingTopic", n, err)
	}
	if n, err := cl.Redrive(ctx, topic, RedriveOptions{}); err != nil || n != 0 {
		t.Errorf("Redrive of an empty dead-letter topic = %d, %v; want 0, nil", n, err)
	}
}

// TestRedriveCopyHeaders pins the retry-topic copy of a dead letter.
func TestRedriveCopyHeaders(t *testing.T) {
	now := time.Date(2026, 11, 23, 1, 2, 3, 0, time.UTC)
	tests := []struct {
		name       string
		in         []kafka.Header
		wantMax    string
		wantOrigin string
	}{
		{"exhausted gets one more", []kafka.Header{header(HeaderKind, "k"), header(HeaderMaxAttempts, "3"), header(HeaderAttempt, "3"),
			header(HeaderOrigin, "jobs/1/7"), header(HeaderOutcome, "retry"), header(HeaderQueue, "old")}, "4", "jobs/1/7"},
		{"discarded keeps its budget", []kafka.Header{header(HeaderKind, "k"), header(HeaderMaxAttempts, "5"), header(HeaderAttempt, "1"),
			header(HeaderOrigin, "jobs/0/2"), header(HeaderOutcome, "discard")}, "5", "jobs/0/2"},
		{"no origin: the dead letter's own", []kafka.Header{header(HeaderKind, "k")}, "25", "jobs.dlq/3/9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := kafka.Message{Topic: "jobs.dlq", Partition: 3, Offset: 9, Key: []byte("key"), Value: []byte(`{}`), Headers: tt.in}
			out := redriveCopy(m, "jobs", "jobs.retry", now)
			if out.Topic != "jobs.retry" || string(out.Key) != "key" || string(out.Value) != `{}` {
				t.Fatalf("copy to %s key %q value %q", out.Topic, out.Key, out.Value)
			}
			for key, want := range map[string]string{
				HeaderMaxAttempts: tt.wantMax, HeaderOrigin: tt.wantOrigin, HeaderQueue: "jobs",
				HeaderNotBefore: now.Format(time.RFC3339Nano), HeaderKind: "k",
			} {
				if got, _ := Header(out, key); got != want {
					t.Errorf("%s = %q, want %q", key, got, want)
				}
			}
			if v, ok := Header(out, HeaderOutcome); ok {
				t.Errorf("the copy keeps %s %q", HeaderOutcome, v)
			}
			n := 0
			for _, h := range out.Headers {
				if h.Key == HeaderMaxAttempts || h.Key == HeaderQueue {
					n++
				}
			}
			if n != 2 {
				t.Errorf("%d max-attempts and queue headers, want one of each", n)
			}
		})
	}
}
