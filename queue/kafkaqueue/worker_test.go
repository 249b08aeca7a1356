package kafkaqueue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/worker"
)

type effectJob struct {
	Seq int `json:"seq"`
}

func (effectJob) Kind() string { return "effect" }

type poisonJob struct{}

func (poisonJob) Kind() string { return "poison" }

// quickRetry retries after 10ms, so the test does not wait out backoffs.
type quickRetry struct{}

func (quickRetry) NextRetry(*queue.Job) time.Time { return time.Now().Add(10 * time.Millisecond) }

// workerMember is a service instance: the worker runtime on a Kafka backend.
type workerMember struct {
	b *Backend
	w *worker.Worker
}

func startWorker(t *testing.T, name string, cfg Config, reg *worker.Registry) *workerMember {
	t.Helper()
	b, err := NewBackend(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(b, reg, worker.Config{
		ID: name, Queues: map[string]int{cfg.Topics[0]: 32}, RetryPolicy: quickRetry{},
		PollInterval: 200 * time.Millisecond, Logger: quietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	m := &workerMember{b: b, w: w}
	t.Cleanup(m.stop)
	return m
}

func (m *workerMember) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = m.w.Stop(ctx)
	_ = m.b.Close()
}

// TestWorkerOnKafka runs the worker runtime's typed handlers on the Kafka
// backend: a member stops mid-stream and another joins, every effect lands
// once, and a poison job ends in the dead-letter topic with its error.
func TestWorkerOnKafka(t *testing.T) {
	const (
		partitions = 4
		jobs       = 3000
	)
	db := pgtest.New(t)
	setupEffects(t, db.Pool)
	topic := uniqueName("jobs")
	c := newCluster(t, partitions, topic)
	cl := newTestClient(t, c)
	group := uniqueName("g")
	cfg := c.config(group, topic)
	cfg.ConcurrencyPerPartition = 8
	cfg.InPlaceRetries = 1
	cfg.RetryDelay = 50 * time.Millisecond

	pool := db.NewPool(t, 16)
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[effectJob]) error {
		_, err := writeEffect(ctx, pool, job.Job, job.AttemptedBy[0])
		return err
	})
	worker.Add(reg, func(ctx context.Context, job *worker.Job[poisonJob]) error {
		return errors.New("poison always fails")
	})
	members := map[string]*workerMember{
		"a": startWorker(t, "a", cfg, reg),
		"b": startWorker(t, "b", cfg, reg),
	}

	ctx := context.Background()
	if err := cl.Enqueue(ctx, queue.EnqueueParams{Queue: topic, Kind: "poison", MaxAttempts: 3}, EnqueueOptions{PartitionKey: "poison"}); err != nil {
		t.Fatal(err)
	}
	var batch []EnqueueJob
	for i := range jobs {
		batch = append(batch, EnqueueJob{
			Params:       queue.EnqueueParams{Queue: topic, Kind: "effect", Args: fmt.Appendf(nil, `{"seq":%d}`, i)},
			PartitionKey: fmt.Sprintf("account-%d", i%101),
		})
	}
	if err := cl.EnqueueMany(ctx, batch); err != nil {
		t.Fatal(err)
	}
	effectsAtLeast := func(pool *pgxpool.Pool, n int) func() bool {
		return func() bool { rows, _ := countEffects(t, pool); return rows >= n }
	}
	testwatch.WaitFor(t, 2*time.Minute, "a third of the effects", effectsAtLeast(db.Pool, jobs/3))
	members["a"].stop()
	members["c"] = startWorker(t, "c", cfg, reg)
	testwatch.WaitFor(t, time.Minute, "the new member to get partitions", func() bool {
		return len(members["c"].b.Assignment().Partitions[topic]) > 0
	})
	testwatch.WaitFor(t, 3*time.Minute, "every effect", effectsAtLeast(db.Pool, jobs))

	dead := readAll(t, c, topic+DefaultDeadLetterTopicSuffix, partitions, 1)
	h := map[string]string{}
	for _, x := range dead[0].Headers {
		h[x.Key] = string(x.Value)
	}
	if h[HeaderKind] != "poison" || !strings.Contains(h[HeaderError], "poison always fails") || h[HeaderAttempt] != "3" {
		t.Fatalf("dead letter headers %v: want kind poison, its error, attempt 3", h)
	}
	waitCommitted(t, c, group, topic, partitions)
	rows, seqs := countEffects(t, db.Pool)
	if rows != jobs || seqs != jobs {
		t.Fatalf("effects: %d rows for %d jobs, want %d", rows, seqs, jobs)
	}
}
