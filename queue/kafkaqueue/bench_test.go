package kafkaqueue

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/worker"
)

// BenchmarkConsume runs b.N no-op jobs through the Kafka backend (claim,
// complete, commit) and, on the same topic in the same run, reads them with
// a bare kafka-go consumer group (Reader with GroupID, ReadMessage, commits
// every second). Both clocks start at the first message, so joining the
// group is not counted (nor the first claim's jobs). Each side reads the
// topic twice, alternating, and keeps its better run. It reports jobs/s of
// both and their ratio.
//
//	go test -run '^$' -bench BenchmarkConsume -benchtime 100000x ./queue/kafkaqueue/
func BenchmarkConsume(b *testing.B) {
	c, topic := benchTopic(b, b.N)
	b.ResetTimer()
	bareRate, rate := bestOf2(b, c, topic, benchBackend)
	b.StopTimer()
	b.ReportMetric(rate, "jobs/s")
	b.ReportMetric(bareRate, "bare-jobs/s")
	b.ReportMetric(bareRate/rate, "slowdown-x")
}

// BenchmarkWorker is BenchmarkConsume with the worker runtime driving the
// backend: typed no-op handler, a goroutine per job, batched outcomes.
//
//	go test -run '^$' -bench BenchmarkWorker -benchtime 100000x ./queue/kafkaqueue/
func BenchmarkWorker(b *testing.B) {
	c, topic := benchTopic(b, b.N)
	b.ResetTimer()
	bareRate, rate := bestOf2(b, c, topic, benchWorker)
	b.StopTimer()
	b.ReportMetric(rate, "jobs/s")
	b.ReportMetric(bareRate, "bare-jobs/s")
	b.ReportMetric(bareRate/rate, "slowdown-x")
}

// bestOf2 reads the topic four times, each with a new group: bare, ours,
// bare, ours, and returns the better rate of each, so a burst of load from
// elsewhere on the machine hurts neither side alone.
func bestOf2(b *testing.B, c *testCluster, topic string, ours func(*testing.B, *testCluster, string, int) float64) (bare, rate float64) {
	for range 2 {
		bare = max(bare, benchBare(b, c, topic, b.N))
		rate = max(rate, ours(b, c, topic, b.N))
	}
	return bare, rate
}

type noopJob struct {
	I int `json:"i"`
}

func (noopJob) Kind() string { return "noop" }

// benchTopic writes n no-op jobs to a new topic of 8 partitions.
func benchTopic(b *testing.B, n int) (*testCluster, string) {
	const partitions = 8
	topic := uniqueName("bench")
	c := newCluster(b, partitions, topic)
	cl := newTestClient(b, c)
	ctx := context.Background()
	const chunk = 5000
	for start := 0; start < n; start += chunk {
		batch := make([]EnqueueJob, 0, chunk)
		for i := start; i < min(n, start+chunk); i++ {
			batch = append(batch, EnqueueJob{Params: queue.EnqueueParams{Queue: topic, Kind: "noop", Args: fmt.Appendf(nil, `{"i":%d}`, i)}})
		}
		if err := cl.EnqueueMany(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	return c, topic
}

// benchWorker returns jobs/s completed by a worker after its first handler
// call.
func benchWorker(b *testing.B, c *testCluster, topic string, n int) float64 {
	cfg := c.config(uniqueName("g"), topic)
	cfg.ConcurrencyPerPartition = 1000
	bk, err := NewBackend(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer bk.Close()
	var first sync.Once
	var start time.Time
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[noopJob]) error {
		first.Do(func() { start = time.Now() })
		return nil
	})
	w, err := worker.New(bk, reg, worker.Config{Queues: map[string]int{topic: 2000}, FetchLimit: 1000, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer w.Stop(context.Background())
	deadline := time.Now().Add(10 * time.Minute)
	for w.Stats().Completed < int64(n) {
		if time.Now().After(deadline) {
			b.Fatalf("worker completed %d of %d jobs in 10 minutes", w.Stats().Completed, n)
		}
		time.Sleep(time.Millisecond)
	}
	var elapsed time.Duration
	first.Do(func() {})
	elapsed = time.Since(start)
	return float64(n-1) / elapsed.Seconds()
}

// benchBare returns messages/s read after the first message.
func benchBare(b *testing.B, c *testCluster, topic string, n int) float64 {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:           c.Brokers,
		GroupID:           uniqueName("bare"),
		Topic:             topic,
		MinBytes:          1,
		MaxBytes:          10 << 20,
		MaxWait:           200 * time.Millisecond,
		HeartbeatInterval: 300 * time.Millisecond,
		JoinGroupBackoff:  300 * time.Millisecond,
		CommitInterval:    time.Second,
	})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var start time.Time
	for i := range n {
		if _, err := r.ReadMessage(ctx); err != nil {
			b.Fatalf("bare reader after %d messages: %v", i, err)
		}
		if i == 0 {
			start = time.Now()
		}
	}
	return float64(n-1) / time.Since(start).Seconds()
}

// benchBackend returns jobs/s finished after the first claim that returned
// jobs.
func benchBackend(b *testing.B, c *testCluster, topic string, n int) float64 {
	cfg := c.config(uniqueName("g"), topic)
	cfg.ConcurrencyPerPartition = 1000
	bk, err := NewBackend(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer bk.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	wake, err := bk.Wake(ctx, topic)
	if err != nil {
		b.Fatal(err)
	}
	var start time.Time
	done, first := 0, 0
	fs := make([]queue.Finish, 0, 1000)
	for done < n {
		jobs, err := bk.Claim(ctx, queue.ClaimParams{Queue: topic, Limit: 1000})
		if err != nil {
			b.Fatal(err)
		}
		if len(jobs) == 0 {
			select {
			case <-wake:
			case <-ctx.Done():
				b.Fatalf("backend after %d jobs: %v", done, ctx.Err())
			}
			continue
		}
		if start.IsZero() {
			start, first = time.Now(), len(jobs)
		}
		fs = fs[:0]
		for _, j := range jobs {
			fs = append(fs, queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeComplete})
		}
		stale, err := bk.Finish(ctx, fs)
		if err != nil || len(stale) > 0 {
			b.Fatalf("Finish: %d stale, %v", len(stale), err)
		}
		done += len(jobs)
	}
	return float64(n-first) / time.Since(start).Seconds()
}
