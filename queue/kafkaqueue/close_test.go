package kafkaqueue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
)

// TestCloseWaitsForBackgroundGoroutines shows that once Close returns, the
// committer and the writer retrying a dead letter the broker refuses have
// returned: neither can touch the group or the producer afterwards.
func TestCloseWaitsForBackgroundGoroutines(t *testing.T) {
	topic := uniqueName("jobs")
	c := newCluster(t, 1, topic)
	setMaxMessageBytes(t, c, topic+DefaultDeadLetterTopicSuffix, 1000)
	cl := newTestClient(t, c)
	ctx := context.Background()
	if err := cl.EnqueueMany(ctx, []EnqueueJob{
		{Params: queue.EnqueueParams{Queue: topic, Kind: "done"}},
		{Params: queue.EnqueueParams{Queue: topic, Kind: "dead", Args: paddedArgs(4000)}},
	}); err != nil {
		t.Fatal(err)
	}
	cfg := c.config(uniqueName("g"), topic)
	cfg.ConcurrencyPerPartition = 2
	cfg.CommitInterval = time.Millisecond // the committer is busy when Close comes
	logs := newErrorLog()
	cfg.Logger = slog.New(logs)
	b, err := NewBackend(cfg)
	if err != nil {
		t.Fatal(err)
	}
	jobs := claimN(t, b, topic, 2, time.Minute)
	var fs []queue.Finish
	var dead string
	for _, j := range jobs {
		f := queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeComplete}
		if j.Kind == "dead" {
			f.Outcome, dead = queue.OutcomeDiscard, j.Key
		}
		fs = append(fs, f)
	}
	if stale, err := b.Finish(ctx, fs); err != nil || len(stale) != 0 {
		t.Fatalf("Finish = %v, %v", stale, err)
	}
	testwatch.WaitFor(t, time.Minute, "a failed dead-letter write logged", func() bool { return logs.count(dead) >= 1 })
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	// run itself may still be returning: Close waits until it closed done.
	for _, fn := range []string{"(*Backend).commitLoop", "(*Backend).retryHandOff"} {
		if strings.Contains(stacks, fn) {
			t.Errorf("%s still runs after Close returned", fn)
		}
	}
}

// TestClientCloseDuringEnqueues closes a Client while goroutines enqueue
// without pause. Close returns (kafka-go's Writer.Close alone can wait for
// ever here), every enqueue that returned nil is in the topic, and an
// enqueue after Close reports queue.ErrClosed.
func TestClientCloseDuringEnqueues(t *testing.T) {
	topic := uniqueName("jobs")
	c := newCluster(t, 4, topic)
	var want int64
	for round := range 5 {
		cl, err := NewClient(Config{Brokers: c.Brokers, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var ok atomic.Int64
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					err := cl.Enqueue(context.Background(), queue.EnqueueParams{Queue: topic, Kind: "k"},
						EnqueueOptions{PartitionKey: fmt.Sprintf("r%d-w%d-%d", round, w, i)})
					if errors.Is(err, queue.ErrClosed) {
						return
					}
					if err == nil {
						ok.Add(1)
					}
				}
			}()
		}
		time.Sleep(time.Duration(20+20*round) * time.Millisecond)
		closed := make(chan error, 1)
		go func() { closed <- cl.Close() }()
		select {
		case err := <-closed:
			if err != nil {
				t.Fatalf("round %d: Close: %v", round, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("round %d: Close did not return within a minute of enqueues in flight", round)
		}
		wg.Wait()
		if err := cl.Enqueue(context.Background(), queue.EnqueueParams{Queue: topic, Kind: "k"}); !errors.Is(err, queue.ErrClosed) {
			t.Fatalf("round %d: Enqueue after Close = %v, want queue.ErrClosed", round, err)
		}
		want += ok.Load()
	}
	ends, err := endOffsets(context.Background(), c.Brokers, topic, 4)
	if err != nil {
		t.Fatal(err)
	}
	var got int64
	for _, e := range ends {
		got += e
	}
	if got < want {
		t.Fatalf("%d messages in the topic, fewer than the %d enqueues that returned nil", got, want)
	}
}
