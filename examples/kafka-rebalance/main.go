// Command kafka-rebalance shows a Kafka consumer group rebalancing mid-stream
// with every job's effect applied once.
//
// Three service instances run the same worker handler on the partitions of
// one topic through kafkaqueue. While 20,000 jobs stream in, one instance
// stops and a fourth joins; their partitions move each time. Every handler
// writes its effect to Postgres keyed by the job's idempotency key and
// fenced by its consumer-group generation, so a job that runs again after a
// rebalance (its offset was not yet committed) changes nothing twice, and a
// late write from an older generation is rejected. The program prints the
// partitions as they move and the counts at the end, and exits non-zero if
// any job's effect is missing or doubled.
//
//	go run ./examples/kafka-rebalance
//
// It starts a throwaway Postgres and an in-process Kafka-protocol broker
// unless DATABASE_URL and KAFKA_BROKERS name real ones.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/jobfence/jobfence/jobfencetest/devserver"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/kafkaqueue"
	"github.com/jobfence/jobfence/worker"
)

// EffectArgs is one job: apply effect number Seq.
type EffectArgs struct {
	Seq int `json:"seq"`
}

// Kind names the handler.
func (EffectArgs) Kind() string { return "effect" }

// The effect table and its fenced write: a row per job; a write under a
// generation no newer than the row's changes nothing.
const (
	createEffects = `CREATE TABLE %s (
	msg_key text PRIMARY KEY,
	seq     int NOT NULL,
	fence   bigint NOT NULL,
	member  text NOT NULL,
	writes  int NOT NULL DEFAULT 1
)`
	upsertEffect = `INSERT INTO %s (msg_key, seq, fence, member) VALUES ($1, $2, $3, $4)
ON CONFLICT (msg_key) DO UPDATE SET fence = EXCLUDED.fence, member = EXCLUDED.member, writes = %[1]s.writes + 1
WHERE %[1]s.fence < EXCLUDED.fence
RETURNING writes`
	countEffects = `SELECT count(*), count(DISTINCT seq) FROM %s`
	dropEffects  = `DROP TABLE IF EXISTS %s`
)

type counts struct {
	first, rewritten, rejected atomic.Int64
}

func main() {
	jobs := flag.Int("jobs", 20000, "jobs to produce")
	partitions := flag.Int("partitions", 8, "partitions of the topic")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *jobs, *partitions); err != nil {
		fmt.Fprintln(os.Stderr, "kafka-rebalance:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, jobs, partitions int) error {
	env, err := devserver.Start(ctx, devserver.Options{Kafka: true, Postgres: true, KafkaPartitions: int32(partitions)})
	if err != nil {
		return err
	}
	defer env.Close()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

	suffix := randomHex(4)
	topic := "rebalance-" + suffix
	table := pgx.Identifier{"kafka_rebalance_effects_" + suffix}.Sanitize()
	if err := createTopics(ctx, env.KafkaBrokers, partitions, topic); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, env.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, fmt.Sprintf(createEffects, table)); err != nil {
		return fmt.Errorf("create effects table: %w", err)
	}
	defer pool.Exec(context.Background(), fmt.Sprintf(dropEffects, table))

	var c counts
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[EffectArgs]) error {
		var writes int
		err := pool.QueryRow(ctx, fmt.Sprintf(upsertEffect, table),
			job.IdempotencyKey(), job.Args.Seq, job.Fence, job.AttemptedBy[0]).Scan(&writes)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			c.rejected.Add(1) // a write under an older or equal generation
			return nil
		case err != nil:
			return err
		case writes == 1:
			c.first.Add(1)
		default:
			c.rewritten.Add(1) // the job ran again under a newer generation
		}
		return nil
	})

	cfg := kafkaqueue.Config{
		Brokers:                 env.KafkaBrokers,
		GroupID:                 "rebalance-" + suffix,
		Topics:                  []string{topic},
		ConcurrencyPerPartition: 8,
		HeartbeatInterval:       500 * time.Millisecond,
		JoinGroupBackoff:        500 * time.Millisecond,
		SessionTimeout:          10 * time.Second,
		RebalanceTimeout:        10 * time.Second,
		Logger:                  log,
	}
	members := map[string]*member{}
	defer func() {
		for _, m := range members {
			m.stop()
		}
	}()
	for _, name := range []string{"a", "b", "c"} {
		m, err := startMember(ctx, name, cfg, reg, log)
		if err != nil {
			return err
		}
		members[name] = m
	}

	client, err := kafkaqueue.NewClient(kafkaqueue.Config{Brokers: env.KafkaBrokers, Logger: log})
	if err != nil {
		return err
	}
	defer client.Close()
	produced := make(chan error, 1)
	go func() { produced <- produce(ctx, client, topic, jobs) }()

	effects := func() (rows, seqs int, err error) {
		err = pool.QueryRow(ctx, fmt.Sprintf(countEffects, table)).Scan(&rows, &seqs)
		return rows, seqs, err
	}
	lastLayout := ""
	step := 0
	start := time.Now()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		rows, _, err := effects()
		if err != nil {
			return err
		}
		if l := layout(members, topic); l != lastLayout {
			fmt.Printf("%6.1fs  %5d effects  partitions %s\n", time.Since(start).Seconds(), rows, l)
			lastLayout = l
		}
		switch {
		case step == 0 && rows >= jobs/4:
			fmt.Printf("%6.1fs  stopping member b\n", time.Since(start).Seconds())
			members["b"].stop()
			delete(members, "b")
			step++
		case step == 1 && rows >= jobs/2:
			fmt.Printf("%6.1fs  adding member d\n", time.Since(start).Seconds())
			m, err := startMember(ctx, "d", cfg, reg, log)
			if err != nil {
				return err
			}
			members["d"] = m
			step++
		}
		if rows >= jobs {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after 5 minutes only %d of %d effects", rows, jobs)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := <-produced; err != nil {
		return err
	}
	rows, seqs, err := effects()
	if err != nil {
		return err
	}
	fmt.Printf("produced %d jobs in %.1fs\n", jobs, time.Since(start).Seconds())
	fmt.Printf("effects applied:           %d (distinct jobs %d)\n", rows, seqs)
	fmt.Printf("ran again after rebalance: %d (rewritten under a newer generation %d, rejected by the fence %d)\n",
		c.rewritten.Load()+c.rejected.Load(), c.rewritten.Load(), c.rejected.Load())
	if rows != jobs || seqs != jobs {
		return fmt.Errorf("%d effects for %d distinct jobs, want exactly %d of each", rows, seqs, jobs)
	}
	fmt.Println("every job's effect once")
	return nil
}

// member is one service instance: a Kafka backend and a worker on it.
type member struct {
	b *kafkaqueue.Backend
	w *worker.Worker
}

func startMember(ctx context.Context, name string, cfg kafkaqueue.Config, reg *worker.Registry, log *slog.Logger) (*member, error) {
	b, err := kafkaqueue.NewBackend(cfg)
	if err != nil {
		return nil, err
	}
	w, err := worker.New(b, reg, worker.Config{
		ID:     name,
		Queues: map[string]int{cfg.Topics[0]: 64},
		Logger: log,
	})
	if err != nil {
		b.Close()
		return nil, err
	}
	if err := w.Start(ctx); err != nil {
		b.Close()
		return nil, err
	}
	return &member{b: b, w: w}, nil
}

// stop drains the worker (running jobs finish and their offsets are
// committed), then leaves the group.
func (m *member) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = m.w.Stop(ctx)
	_ = m.b.Close()
}

// layout describes which member owns which partitions of topic.
func layout(members map[string]*member, topic string) string {
	var names []string
	for n := range members {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		a := members[n].b.Assignment()
		parts = append(parts, fmt.Sprintf("%s=%v@gen%d", n, a.Partitions[topic], a.Generation))
	}
	return strings.Join(parts, " ")
}

func produce(ctx context.Context, c *kafkaqueue.Client, topic string, n int) error {
	const chunk = 1000
	for start := 0; start < n; start += chunk {
		batch := make([]kafkaqueue.EnqueueJob, 0, chunk)
		for i := start; i < min(n, start+chunk); i++ {
			batch = append(batch, kafkaqueue.EnqueueJob{
				Params:       queue.EnqueueParams{Queue: topic, Kind: EffectArgs{}.Kind(), Args: fmt.Appendf(nil, `{"seq":%d}`, i)},
				PartitionKey: fmt.Sprintf("account-%d", i%997),
			})
		}
		if err := c.EnqueueMany(ctx, batch); err != nil {
			return err
		}
		// Stream rather than dump: the rebalances happen mid-stream.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// createTopics creates topic, its retry and its dead-letter topic.
func createTopics(ctx context.Context, brokers []string, partitions int, topic string) error {
	var cfg kafkaqueue.Config
	cl := &kafka.Client{Addr: kafka.TCP(brokers...)}
	req := &kafka.CreateTopicsRequest{}
	for _, t := range []string{topic, cfg.RetryTopic(topic), cfg.DeadLetterTopic(topic)} {
		req.Topics = append(req.Topics, kafka.TopicConfig{Topic: t, NumPartitions: partitions, ReplicationFactor: 1})
	}
	res, err := cl.CreateTopics(ctx, req)
	if err != nil {
		return fmt.Errorf("create topics: %w", err)
	}
	for t, err := range res.Errors {
		if err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", t, err)
		}
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
