package kafkaqueue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/jobfence/jobfence/queue"
)

// ErrUnknownQueue reports a queue that is not one of the Backend's
// Config.Topics.
var ErrUnknownQueue = errors.New("kafkaqueue: unknown queue")

// The interfaces a worker finds by assertion: a Backend must keep them all.
var (
	_ queue.Backend   = (*Backend)(nil)
	_ queue.Waker     = (*Backend)(nil)
	_ queue.Canceller = (*Backend)(nil)
)

// Backend runs jobs from Kafka partitions owned by this member of a consumer
// group. It implements queue.Backend, queue.Waker and queue.Canceller, so a
// worker drives it like any other backend. It is safe for concurrent use.
//
// A job's Fence is the group generation it was claimed in. When the
// generation ends (a member joins, leaves or is evicted) every running job is
// lost: Heartbeat reports it, Cancelled sends its lease, Finish returns it as
// stale and commits nothing for it. Its message is delivered again to the
// partition's next owner under a higher fence.
type Backend struct {
	cfg     Config
	log     *slog.Logger
	group   *kafka.ConsumerGroup
	writer  *producer
	queueOf map[string]string // main and retry topics -> queue

	mu        sync.Mutex
	gen       *generation
	running   map[int64]*entry
	nextID    int64
	rr        map[string]int
	wakers    map[string]map[chan struct{}]struct{}
	cancelled map[chan queue.Lease]struct{}
	timers    map[string]*wakeTimer
	closed    bool

	commitMu   sync.Mutex
	commitKick chan struct{}
	cancel     context.CancelFunc
	bg         sync.WaitGroup // commitLoop and hand-off writers, awaited by run; Add only in run or under mu while !closed
	done       chan struct{}
	closeOnce  sync.Once
}

// NewBackend checks that cfg.Topics and their retry and dead-letter topics
// exist (ErrMissingTopic otherwise) and joins the consumer group cfg.GroupID
// on the topics and their retry topics. It returns without waiting for the
// group: partitions are fetched once the group assigns them. Close leaves the
// group.
func NewBackend(cfg Config) (*Backend, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validateBackend(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := checkTopics(ctx, cfg)
	cancel()
	if err != nil {
		return nil, err
	}
	b := &Backend{
		cfg:        cfg,
		log:        cfg.Logger,
		queueOf:    make(map[string]string, 2*len(cfg.Topics)),
		running:    make(map[int64]*entry),
		rr:         make(map[string]int),
		wakers:     make(map[string]map[chan struct{}]struct{}),
		cancelled:  make(map[chan queue.Lease]struct{}),
		timers:     make(map[string]*wakeTimer),
		done:       make(chan struct{}),
		commitKick: make(chan struct{}, 1),
	}
	topics := make([]string, 0, 2*len(cfg.Topics))
	for _, t := range cfg.Topics {
		b.queueOf[t] = t
		b.queueOf[t+cfg.RetryTopicSuffix] = t
		topics = append(topics, t, t+cfg.RetryTopicSuffix)
	}
	group, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                cfg.GroupID,
		Brokers:           cfg.Brokers,
		Dialer:            cfg.Dialer,
		Topics:            topics,
		HeartbeatInterval: cfg.HeartbeatInterval,
		SessionTimeout:    cfg.SessionTimeout,
		RebalanceTimeout:  cfg.RebalanceTimeout,
		JoinGroupBackoff:  cfg.JoinGroupBackoff,
		StartOffset:       cfg.StartOffset,
		ErrorLogger:       kafkaLogger{cfg.Logger},
	})
	if err != nil {
		return nil, fmt.Errorf("kafkaqueue: consumer group: %w", err)
	}
	b.group = group
	b.writer = newProducer(cfg)
	runCtx, stop := context.WithCancel(context.Background())
	b.cancel = stop
	go b.run(runCtx)
	return b, nil
}

// Assignment is what this member owns right now.
type Assignment struct {
	// Generation is the group generation, the fence of the jobs claimed
	// now; zero between generations.
	Generation int64
	// Partitions lists the owned partitions per topic, in order.
	Partitions map[string][]int
	// CommitLag counts the messages of the owned partitions that are
	// finished but whose offsets are not committed yet: what the group
	// would deliver again if this member died now (besides its running
	// jobs). It grows when commits fail.
	CommitLag int64
}

// Assignment returns the member's current generation and partitions.
func (b *Backend) Assignment() Assignment {
	b.mu.Lock()
	defer b.mu.Unlock()
	a := Assignment{Partitions: map[string][]int{}}
	if b.gen == nil {
		return a
	}
	a.Generation = b.gen.id
	for _, p := range b.gen.parts {
		a.Partitions[p.topic] = append(a.Partitions[p.topic], p.id)
		// Until its first commit the group's offset is where the
		// assignment started, when the broker named one.
		base := p.committed
		if base < 0 {
			base = p.start
		}
		if wm := p.watermark(); base >= 0 && wm > base {
			a.CommitLag += wm - base
		}
	}
	return a
}

func (b *Backend) queueErr(q string) error {
	if _, ok := b.queueOf[q]; ok && b.queueOf[q] == q {
		return nil
	}
	return fmt.Errorf("%w: %q is not in Config.Topics %q", ErrUnknownQueue, q, b.cfg.Topics)
}

// Claim hands out up to p.Limit ready messages of the topic p.Queue and its
// retry topic from the partitions this member owns, as jobs fenced by the
// current generation. A message is ready when its not-before time has come,
// its partition runs fewer than ConcurrencyPerPartition jobs, and no earlier
// message with the same key is unfinished. It never waits for the network.
func (b *Backend) Claim(ctx context.Context, p queue.ClaimParams) ([]*queue.Job, error) {
	if err := b.queueErr(p.Queue); err != nil {
		return nil, err
	}
	if p.Limit <= 0 {
		return nil, nil
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, queue.ErrClosed
	}
	g := b.gen
	if g == nil {
		return nil, nil
	}
	parts := g.byQueue[p.Queue]
	if len(parts) == 0 {
		return nil, nil
	}
	start := b.rr[p.Queue]
	b.rr[p.Queue] = start + 1
	var jobs []*queue.Job
	var earliest time.Time
	for i := range parts {
		part := parts[(start+i)%len(parts)]
		jobs = b.claimPartition(part, jobs, p, now, &earliest)
		if len(jobs) >= p.Limit {
			break
		}
	}
	if !earliest.IsZero() {
		b.armTimer(p.Queue, earliest)
	}
	return jobs, nil
}

func (b *Backend) claimPartition(part *partition, jobs []*queue.Job, p queue.ClaimParams, now time.Time, earliest *time.Time) []*queue.Job {
	for _, e := range part.entries {
		if part.running >= b.cfg.ConcurrencyPerPartition || len(jobs) >= p.Limit {
			break
		}
		if e.state != statePending || !part.eligible(e) {
			continue
		}
		if e.notBefore.After(now) {
			if earliest.IsZero() || e.notBefore.Before(*earliest) {
				*earliest = e.notBefore
			}
			continue
		}
		b.nextID++
		e.jobID = b.nextID
		e.state = stateRunning
		part.running++
		b.running[e.jobID] = e
		jobs = append(jobs, b.job(e, p, now))
	}
	return jobs
}

func (b *Backend) job(e *entry, p queue.ClaimParams, now time.Time) *queue.Job {
	scheduled := e.msg.Time
	if e.notBefore.After(scheduled) {
		scheduled = e.notBefore
	}
	j := &queue.Job{
		ID:          e.jobID,
		Queue:       e.part.queue,
		Kind:        e.meta.kind,
		EncodedArgs: e.msg.Value,
		State:       queue.StateRunning,
		Priority:    queue.DefaultPriority,
		Attempt:     e.attempt + 1,
		MaxAttempts: e.meta.maxAttempts,
		Fence:       e.part.gen.id,
		ScheduledAt: scheduled,
		CreatedAt:   e.msg.Time,
		AttemptedAt: now,
		Key:         e.key(),
		Metadata:    e.meta.metadata,
		Deadline:    e.meta.deadline,
		Timeout:     e.meta.timeout,
	}
	if p.Lease > 0 {
		j.LeaseExpiresAt = now.Add(p.Lease)
	}
	if len(e.errs) > 0 {
		j.Errors = append([]queue.AttemptError(nil), e.errs...)
	}
	if p.WorkerID != "" {
		j.AttemptedBy = []string{p.WorkerID}
	}
	return j
}

// current reports whether e's claim still holds: its generation is the
// member's current one. Callers hold b.mu.
func (b *Backend) current(e *entry, fence int64) bool {
	g := e.part.gen
	return e.state == stateRunning && g.id == fence && !g.ended && b.gen == g
}

// Heartbeat returns the leases that are lost: their generation ended or
// their partition is no longer this member's. Kafka holds a claim as long as
// the member stays in the group, so d is not used.
func (b *Backend) Heartbeat(ctx context.Context, leases []queue.Lease, d time.Duration) ([]queue.Lease, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var lost []queue.Lease
	for _, l := range leases {
		e := b.running[l.ID]
		if e == nil || !b.current(e, l.Fence) {
			lost = append(lost, l)
		}
	}
	return lost, nil
}

// Close commits what is done, leaves the group (its partitions move to the
// other members at once), waits for its background goroutines (the
// committer and the writers of retry and dead-letter copies) and closes the
// producer. Jobs still running are lost: their Finish is stale and their
// messages run again elsewhere; stop the worker first to let them finish.
func (b *Backend) Close() error {
	var err error
	b.closeOnce.Do(func() {
		b.mu.Lock()
		b.closed = true
		g := b.gen
		for _, wt := range b.timers {
			wt.t.Stop()
		}
		b.mu.Unlock()
		if g != nil {
			if cerr := b.commit(g); cerr != nil {
				b.log.Warn("kafkaqueue: final commit failed; done messages may run again", "err", cerr)
			}
		}
		err = b.group.Close()
		b.cancel()
		<-b.done
		if werr := b.writer.close(); werr != nil && err == nil {
			err = werr
		}
		if err != nil {
			err = fmt.Errorf("kafkaqueue: close: %w", err)
		}
	})
	return err
}
