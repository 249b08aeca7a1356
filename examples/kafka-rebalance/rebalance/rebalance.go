// Package rebalance is the kafka-rebalance scenario: three members of one
// consumer group work a topic through kafkaqueue while jobs stream in; one
// member leaves and a fourth joins mid-stream. Partitions move, and jobs
// in flight on a moved partition run again under the new owner. Every
// job's effect is a row written under the job's fence (the group
// generation), so a job run again after a rebalance takes effect once.
package rebalance

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

	"github.com/jobfence/jobfence/examples/scenario"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/kafkaqueue"
	"github.com/jobfence/jobfence/worker"
)

// EffectArgs is the scenario's job: apply effect number Seq.
type EffectArgs struct {
	Seq int `json:"seq"`
}

// Kind implements queue.Args.
func (EffectArgs) Kind() string { return "effect" }

const (
	jobs = 3000

	createEffectsSQL = `CREATE TABLE kafka_effects (
	msg_key text PRIMARY KEY, seq int NOT NULL, fence bigint NOT NULL, member text NOT NULL,
	writes int NOT NULL DEFAULT 1)`
	// upsertEffectSQL is the fenced effect: one row per job; a write
	// under a generation no newer than the row's changes nothing.
	upsertEffectSQL = `INSERT INTO kafka_effects (msg_key, seq, fence, member) VALUES ($1, $2, $3, $4)
ON CONFLICT (msg_key) DO UPDATE SET fence = EXCLUDED.fence, member = EXCLUDED.member, writes = kafka_effects.writes + 1
WHERE kafka_effects.fence < EXCLUDED.fence
RETURNING writes`
	countEffectsSQL = `SELECT count(*), count(DISTINCT seq) FROM kafka_effects`
)

// member is one service instance: a Kafka backend and a worker on it.
type member struct {
	b *kafkaqueue.Backend
	w *worker.Worker
}

func (m *member) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = m.w.Stop(ctx)
	_ = m.b.Close()
}

// Run plays the scenario on env and measures it.
func Run(ctx context.Context, env *scenario.Env) (scenario.Result, error) {
	var o scenario.Result
	suffix := randomHex(4)
	topic := "rebalance-" + suffix
	if err := createTopics(ctx, env.KafkaBrokers, topic); err != nil {
		return o, err
	}
	if _, err := env.Pool.Exec(ctx, createEffectsSQL); err != nil {
		return o, err
	}
	var runs, rejected atomic.Int64
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[EffectArgs]) error {
		runs.Add(1)
		var writes int
		err := env.Pool.QueryRow(ctx, upsertEffectSQL, job.IdempotencyKey(), job.Args.Seq, job.Fence, job.AttemptedBy[0]).Scan(&writes)
		if errors.Is(err, pgx.ErrNoRows) {
			rejected.Add(1) // written already under this or a newer generation
			return nil
		}
		return err
	})
	cfg := kafkaqueue.Config{
		Brokers: env.KafkaBrokers, GroupID: "rebalance-" + suffix, Topics: []string{topic},
		ConcurrencyPerPartition: 8,
		HeartbeatInterval:       500 * time.Millisecond, JoinGroupBackoff: 500 * time.Millisecond,
		SessionTimeout: 10 * time.Second, RebalanceTimeout: 10 * time.Second,
		Logger: env.Log(),
	}
	members := map[string]*member{}
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
		w, err := worker.New(b, reg, worker.Config{ID: name, Queues: map[string]int{topic: 64}, Logger: env.Log()})
		if err == nil {
			err = w.Start(ctx)
		}
		if err != nil {
			b.Close()
			return err
		}
		members[name] = &member{b: b, w: w}
		return nil
	}
	for _, name := range []string{"a", "b", "c"} {
		if err := join(name); err != nil {
			return o, err
		}
	}
	client, err := kafkaqueue.NewClient(kafkaqueue.Config{Brokers: env.KafkaBrokers, Logger: env.Log()})
	if err != nil {
		return o, err
	}
	defer client.Close()
	produced := make(chan error, 1)
	go func() { produced <- produce(ctx, client, topic) }()
	env.Logf("members a, b, c in group %s; %d jobs streaming into %s", cfg.GroupID, jobs, topic)

	step := 0
	lastLayout := ""
	err = scenario.WaitUntil(ctx, 3*time.Minute, "every job's effect", func() (bool, error) {
		var rows, seqs int
		if err := env.Pool.QueryRow(ctx, countEffectsSQL).Scan(&rows, &seqs); err != nil {
			return false, err
		}
		if l := layout(members, topic); l != lastLayout {
			env.Logf("%4d effects; partitions %s", rows, l)
			lastLayout = l
		}
		switch {
		case step == 0 && rows >= jobs/4:
			env.Logf("%4d effects; member b leaves", rows)
			members["b"].stop()
			delete(members, "b")
			step++
		case step == 1 && rows >= jobs/2:
			env.Logf("%4d effects; member d joins", rows)
			if err := join("d"); err != nil {
				return false, err
			}
			step++
		}
		return rows >= jobs && step == 2, nil
	})
	if err != nil {
		return o, err
	}
	if err := <-produced; err != nil {
		return o, err
	}
	var rows, seqs int64
	if err := env.Pool.QueryRow(ctx, countEffectsSQL).Scan(&rows, &seqs); err != nil {
		return o, err
	}
	o.Attempted, o.Effects, o.WantEffects = runs.Load(), seqs, jobs
	o.Rejected = o.Attempted - seqs
	if rows != seqs {
		o.Problems = append(o.Problems, fmt.Sprintf("%d effect rows for %d jobs", rows, seqs))
	}
	env.Logf("%d handler runs for %d jobs: %d effects; of the %d runs again, %d were refused by the generation fence and %d rewrote their row under a newer generation",
		o.Attempted, jobs, seqs, o.Rejected, rejected.Load(), o.Rejected-rejected.Load())
	return o, nil
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

// produce streams the jobs in small batches, so the rebalances happen
// mid-stream.
func produce(ctx context.Context, c *kafkaqueue.Client, topic string) error {
	const chunk = 100
	for start := 0; start < jobs; start += chunk {
		batch := make([]kafkaqueue.EnqueueJob, 0, chunk)
		for i := start; i < min(jobs, start+chunk); i++ {
			batch = append(batch, kafkaqueue.EnqueueJob{
				Params:       queue.EnqueueParams{Queue: topic, Kind: EffectArgs{}.Kind(), Args: fmt.Appendf(nil, `{"seq":%d}`, i)},
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

// createTopics creates topic, its retry and its dead-letter topic.
func createTopics(ctx context.Context, brokers []string, topic string) error {
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

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
