package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/kafkaqueue"
	"github.com/jobfence/jobfence/worker"
)

// effectArgs is the job of scenario 6: apply effect number Seq.
type effectArgs struct {
	Seq int `json:"seq"`
}

func (effectArgs) Kind() string { return "demo-effect" }

const (
	kafkaJobs = 3000

	createKafkaEffectsSQL = `CREATE TABLE demo_kafka_effects (
	msg_key text PRIMARY KEY, seq int NOT NULL, fence bigint NOT NULL, member text NOT NULL,
	writes int NOT NULL DEFAULT 1)`
	// upsertKafkaEffectSQL is the fenced effect: one row per job; a write
	// under a generation no newer than the row's changes nothing.
	upsertKafkaEffectSQL = `INSERT INTO demo_kafka_effects (msg_key, seq, fence, member) VALUES ($1, $2, $3, $4)
ON CONFLICT (msg_key) DO UPDATE SET fence = EXCLUDED.fence, member = EXCLUDED.member, writes = demo_kafka_effects.writes + 1
WHERE demo_kafka_effects.fence < EXCLUDED.fence
RETURNING writes`
	countKafkaEffectsSQL = `SELECT count(*), count(DISTINCT seq) FROM demo_kafka_effects`
)

// kafkaMember is one service instance: a Kafka backend and a worker on it.
type kafkaMember struct {
	b *kafkaqueue.Backend
	w *worker.Worker
}

func (m *kafkaMember) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = m.w.Stop(ctx)
	_ = m.b.Close()
}

// demoKafka is scenario 6: three members of one consumer group work a
// topic through kafkaqueue while jobs stream in; one member leaves and a
// fourth joins mid-stream. Every job's effect is a row written under the
// job's generation fence, so a job run again after a rebalance changes
// nothing twice.
func demoKafka(ctx context.Context, d *demo, p progress) (outcome, error) {
	var o outcome
	suffix := randomDemoHex(4)
	topic := "demo-" + suffix
	if err := createDemoTopics(ctx, d.brokers, topic); err != nil {
		return o, err
	}
	if _, err := d.pool.Exec(ctx, createKafkaEffectsSQL); err != nil {
		return o, err
	}
	var runs, rejected atomic.Int64
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[effectArgs]) error {
		runs.Add(1)
		var writes int
		err := d.pool.QueryRow(ctx, upsertKafkaEffectSQL, job.IdempotencyKey(), job.Args.Seq, job.Fence, job.AttemptedBy[0]).Scan(&writes)
		if errors.Is(err, pgx.ErrNoRows) {
			rejected.Add(1) // written already under this or a newer generation
			return nil
		}
		return err
	})
	cfg := kafkaqueue.Config{
		Brokers: d.brokers, GroupID: "demo-" + suffix, Topics: []string{topic},
		ConcurrencyPerPartition: 8,
		HeartbeatInterval:       500 * time.Millisecond, JoinGroupBackoff: 500 * time.Millisecond,
		SessionTimeout: 10 * time.Second, RebalanceTimeout: 10 * time.Second,
		Logger: d.log,
	}
	members := map[string]*kafkaMember{}
	defer func() {
		for _, m := range members {
			m.stop()
		}
	}()
	join := func(name string) error {
		b, err := kafkaqueue.NewBackend(cfg)
		if err != nil {
			return err
		}
		w, err := worker.New(b, reg, worker.Config{ID: name, Queues: map[string]int{topic: 64}, Logger: d.log})
		if err == nil {
			err = w.Start(ctx)
		}
		if err != nil {
			b.Close()
			return err
		}
		members[name] = &kafkaMember{b: b, w: w}
		return nil
	}
	for _, name := range []string{"a", "b", "c"} {
		if err := join(name); err != nil {
			return o, err
		}
	}
	client, err := kafkaqueue.NewClient(kafkaqueue.Config{Brokers: d.brokers, Logger: d.log})
	if err != nil {
		return o, err
	}
	defer client.Close()
	produced := make(chan error, 1)
	go func() { produced <- produceDemo(ctx, client, topic) }()
	p("members a, b, c in group %s; %d jobs streaming into %s", cfg.GroupID, kafkaJobs, topic)

	step := 0
	lastLayout := ""
	err = waitUntil(ctx, 3*time.Minute, "every job's effect", func() (bool, error) {
		var rows, seqs int
		if err := d.pool.QueryRow(ctx, countKafkaEffectsSQL).Scan(&rows, &seqs); err != nil {
			return false, err
		}
		if l := kafkaLayout(members, topic); l != lastLayout {
			p("%4d effects; partitions %s", rows, l)
			lastLayout = l
		}
		switch {
		case step == 0 && rows >= kafkaJobs/4:
			p("%4d effects; member b leaves", rows)
			members["b"].stop()
			delete(members, "b")
			step++
		case step == 1 && rows >= kafkaJobs/2:
			p("%4d effects; member d joins", rows)
			if err := join("d"); err != nil {
				return false, err
			}
			step++
		}
		return rows >= kafkaJobs && step == 2, nil
	})
	if err != nil {
		return o, err
	}
	if err := <-produced; err != nil {
		return o, err
	}
	var rows, seqs int64
	if err := d.pool.QueryRow(ctx, countKafkaEffectsSQL).Scan(&rows, &seqs); err != nil {
		return o, err
	}
	o.Attempted, o.Effects, o.WantEffects = runs.Load(), seqs, kafkaJobs
	o.Rejected = o.Attempted - seqs
	if rows != seqs {
		o.Problems = append(o.Problems, fmt.Sprintf("%d effect rows for %d jobs", rows, seqs))
	}
	p("%d handler runs for %d jobs: %d effects; of the %d runs again, %d were refused by the generation fence and %d rewrote their row under a newer generation",
		o.Attempted, kafkaJobs, seqs, o.Rejected, rejected.Load(), o.Rejected-rejected.Load())
	return o, nil
}

// kafkaLayout describes which member owns which partitions of topic.
func kafkaLayout(members map[string]*kafkaMember, topic string) string {
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

// produceDemo streams the jobs in small batches, so the rebalances happen
// mid-stream.
func produceDemo(ctx context.Context, c *kafkaqueue.Client, topic string) error {
	const chunk = 100
	for start := 0; start < kafkaJobs; start += chunk {
		batch := make([]kafkaqueue.EnqueueJob, 0, chunk)
		for i := start; i < min(kafkaJobs, start+chunk); i++ {
			batch = append(batch, kafkaqueue.EnqueueJob{
				Params:       queue.EnqueueParams{Queue: topic, Kind: effectArgs{}.Kind(), Args: fmt.Appendf(nil, `{"seq":%d}`, i)},
				PartitionKey: fmt.Sprintf("account-%d", i%97),
			})
		}
		if err := c.EnqueueMany(ctx, batch); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// createDemoTopics creates topic, its retry and its dead-letter topic.
func createDemoTopics(ctx context.Context, brokers []string, topic string) error {
	var cfg kafkaqueue.Config
	cl := &kafka.Client{Addr: kafka.TCP(brokers...)}
	req := &kafka.CreateTopicsRequest{}
	for _, t := range []string{topic, cfg.RetryTopic(topic), cfg.DeadLetterTopic(topic)} {
		req.Topics = append(req.Topics, kafka.TopicConfig{Topic: t, NumPartitions: 8, ReplicationFactor: 1})
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

func randomDemoHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
