package kafkaqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
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

// generation is one consumer-group generation of this member.
type generation struct {
	id      int64
	kgen    *kafka.Generation
	ctx     context.Context // cancelled when the generation ends or the Backend closes
	cancel  context.CancelFunc
	parts   []*partition
	byQueue map[string][]*partition
	ended   bool // guarded by Backend.mu
}

type wakeTimer struct {
	t  *time.Timer
	at time.Time
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

// Finish applies outcomes of jobs whose generation is still current and
// returns the others as stale. OutcomeComplete marks the message done, and
// the partition's offset is committed up to the first unfinished message, so
// a commit never passes a message whose effect is not done; the commit is
// made at once in the background, or before Finish returns with
// Config.SyncCommit. OutcomeRetry runs the job again in place after f.Delay up
// to Config.InPlaceRetries times, then writes it to the retry topic, and
// writes it to the dead-letter topic once it has had MaxAttempts attempts.
// OutcomeDiscard and OutcomeCancel write it to the dead-letter topic. A
// retry or dead-letter copy that cannot be written is written again in the
// background until it is; the job does not run again meanwhile.
// OutcomeSnooze runs it again after f.Delay without spending an attempt.
//
// With Config.SyncCommit, a lease whose outcome was applied is still returned
// as stale when the broker refuses the commit because the generation ended
// meanwhile: the message will be delivered again to the partition's next
// owner. A commit that fails for another reason (a timeout, a coordinator
// that moved) is logged and left to the background committer: Finish
// returns no error, since the outcomes are applied. Without SyncCommit, a
// refused background commit ends the generation here at once (its running
// jobs are cancelled and their Finish is stale).
func (b *Backend) Finish(ctx context.Context, fs []queue.Finish) ([]queue.Lease, error) {
	for _, f := range fs {
		if f.Outcome < queue.OutcomeComplete || f.Outcome > queue.OutcomeCancel {
			return nil, fmt.Errorf("kafkaqueue: finish job %d: unknown outcome %d", f.ID, f.Outcome)
		}
	}
	now := time.Now()
	var (
		stale   []queue.Lease
		applied []queue.Lease
		g       *generation
		outE    []*entry
	)
	b.mu.Lock()
	for _, f := range fs {
		e := b.running[f.ID]
		if e == nil || !b.current(e, f.Fence) {
			stale = append(stale, f.Lease)
			continue
		}
		delete(b.running, f.ID)
		p := e.part
		p.running--
		e.jobID = 0
		g = p.gen
		applied = append(applied, f.Lease)
		switch f.Outcome {
		case queue.OutcomeComplete:
			p.done(e)
		case queue.OutcomeSnooze:
			e.state = statePending
			e.notBefore = now.Add(f.Delay)
		case queue.OutcomeRetry:
			e.attempt++
			e.errs = append(e.errs, attemptError(f, e.attempt, now))
			switch {
			case e.attempt >= e.meta.maxAttempts:
				e.out = b.deadLetter(e, f.Outcome, now)
				outE = append(outE, e)
			case e.inPlace < b.cfg.InPlaceRetries:
				e.inPlace++
				e.state = statePending
				e.notBefore = now.Add(f.Delay)
			default:
				e.out = b.retry(e, now.Add(max(b.cfg.RetryDelay, f.Delay)))
				outE = append(outE, e)
			}
		case queue.OutcomeDiscard, queue.OutcomeCancel:
			e.attempt++
			e.errs = append(e.errs, attemptError(f, e.attempt, now))
			e.out = b.deadLetter(e, f.Outcome, now)
			outE = append(outE, e)
		}
		b.notify(p.queue)
	}
	for _, e := range outE {
		e.state = stateHandoff
	}
	b.mu.Unlock()

	if len(outE) > 0 {
		b.handOff(ctx, outE)
	}
	if g == nil {
		return stale, nil
	}
	if !b.cfg.SyncCommit {
		b.kickCommit()
		return stale, nil
	}
	if err := b.commit(g); err != nil {
		if isGenerationError(err) {
			b.endGeneration(g, "commit refused")
		}
		if b.ended(g) {
			return append(stale, applied...), nil
		}
		// The outcomes are applied: Finish did its part, and the background
		// committer retries the commit now and every CommitInterval.
		b.log.Warn("kafkaqueue: commit failed; the background committer retries it",
			"group", b.cfg.GroupID, "generation", g.id, "err", err)
		b.kickCommit()
	}
	return stale, nil
}

// kickCommit asks the background committer to commit now; a request
// already pending covers this one.
func (b *Backend) kickCommit() {
	select {
	case b.commitKick <- struct{}{}:
	default:
	}
}

func attemptError(f queue.Finish, attempt int, now time.Time) queue.AttemptError {
	if f.Error != nil {
		ae := *f.Error
		if ae.Attempt == 0 {
			ae.Attempt = attempt
		}
		if ae.At.IsZero() {
			ae.At = now
		}
		return ae
	}
	return queue.AttemptError{Attempt: attempt, At: now, Error: "outcome " + f.Outcome.String()}
}

// Backoff between rounds of writing a job's retry or dead-letter copy that
// could not be written.
const (
	handOffMinBackoff = 100 * time.Millisecond
	handOffMaxBackoff = 10 * time.Second
)

// handOff writes the retry and dead-letter copies of es (entries in
// stateHandoff, their copies in e.out), then marks the entries done. An entry
// whose copy cannot be written keeps it and stays in stateHandoff, holding
// back its key and its partition's commit, and a background writer retries
// the write with backoff until it succeeds or the generation ends (the next
// owner then runs the message again). The handler never runs again because
// a write failed.
func (b *Backend) handOff(ctx context.Context, es []*entry) {
	failed := b.writeCopies(ctx, es, 1)
	if len(failed) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	g := failed[0].part.gen // Finish applies outcomes of the current generation only
	if b.closed || g.ended {
		return
	}
	b.bg.Add(1)
	go func() {
		defer b.bg.Done()
		b.retryHandOff(g, failed)
	}()
}

// retryHandOff writes the copies of es again, with backoff, until all are
// written or g ends.
func (b *Backend) retryHandOff(g *generation, es []*entry) {
	backoff := handOffMinBackoff
	for round := 2; len(es) > 0; round++ {
		t := time.NewTimer(backoff)
		select {
		case <-g.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		es = b.writeCopies(g.ctx, es, round)
		backoff = min(2*backoff, handOffMaxBackoff)
	}
}

// writeCopies writes the copies of es, marks the entries whose copy was
// written done, and returns the others after logging them. A copy the broker
// finds too large is written again at once without its bulky headers (see
// slimCopy), once. The entries' out and slim fields belong to the one
// goroutine writing them while they are in stateHandoff.
func (b *Backend) writeCopies(ctx context.Context, es []*entry, round int) []*entry {
	errs := b.write(ctx, es)
	var again []int
	for i, e := range es {
		if errs[i] != nil && isTooLarge(errs[i]) && !e.slim {
			e.slim = true
			e.out = slimCopy(e.out)
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		slim := make([]*entry, len(again))
		for j, i := range again {
			slim[j] = es[i]
		}
		for j, err := range b.write(ctx, slim) {
			errs[again[j]] = err
		}
	}
	var failed []*entry
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, e := range es {
		if errs[i] != nil {
			failed = append(failed, e)
			if ctx.Err() == nil {
				b.log.Error("kafkaqueue: writing a job's retry or dead-letter copy failed; retrying the write",
					"key", e.key(), "topic", e.out.Topic, "round", round, "err", errs[i])
			}
			continue
		}
		e.out = kafka.Message{}
		e.part.done(e)
		b.notify(e.part.queue)
	}
	return failed
}

// write writes the copies of es and returns each one's error: when some
// were written and others not, only the others have one.
func (b *Backend) write(ctx context.Context, es []*entry) []error {
	msgs := make([]kafka.Message, len(es))
	for i, e := range es {
		msgs[i] = e.out
	}
	errs := make([]error, len(es))
	err := b.writer.write(ctx, msgs...)
	if err == nil {
		return errs
	}
	var we kafka.WriteErrors
	if errors.As(err, &we) && len(we) == len(es) {
		copy(errs, we) // a nil slot was written
		return errs
	}
	var tooLarge kafka.MessageTooLargeError
	if len(es) > 1 && errors.As(err, &tooLarge) {
		// kafka-go refused the whole call for one message: write them one
		// by one to learn which.
		for i := range es {
			errs[i] = b.write(ctx, es[i:i+1])[0]
		}
		return errs
	}
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// isTooLarge reports whether err says a message is larger than the producer
// or the topic takes.
func isTooLarge(err error) bool {
	var we kafka.WriteErrors
	if errors.As(err, &we) {
		for _, e := range we {
			if e != nil && isTooLarge(e) {
				return true
			}
		}
		return false
	}
	var tooLarge kafka.MessageTooLargeError
	return errors.Is(err, kafka.MessageSizeTooLarge) || errors.As(err, &tooLarge)
}

// maxSlimError bounds the HeaderError text of a slimmed copy.
const maxSlimError = 1 << 10

// slimCopy returns m without its HeaderErrors header (every attempt's error
// and stack trace) and with its HeaderError text cut to maxSlimError bytes:
// the copy for a topic that refused m as too large.
func slimCopy(m kafka.Message) kafka.Message {
	hs := make([]kafka.Header, 0, len(m.Headers))
	for _, h := range m.Headers {
		switch h.Key {
		case HeaderErrors:
			continue
		case HeaderError:
			if len(h.Value) > maxSlimError {
				h = kafka.Header{Key: h.Key, Value: h.Value[:maxSlimError:maxSlimError]}
			}
		}
		hs = append(hs, h)
	}
	m.Headers = hs
	return m
}

// forwardHeaders are the headers of a job's retry or dead-letter message.
// Only the last error keeps its stack trace, so the headers stay small.
func (b *Backend) forwardHeaders(e *entry, attempt int) []kafka.Header {
	kept := make([]queue.AttemptError, len(e.errs))
	copy(kept, e.errs)
	for i := 0; i < len(kept)-1; i++ {
		kept[i].Trace = ""
	}
	errs, _ := json.Marshal(kept)
	last := ""
	if len(e.errs) > 0 {
		last = e.errs[len(e.errs)-1].Error
	}
	hs := []kafka.Header{
		header(HeaderKind, e.meta.kind),
		header(HeaderMaxAttempts, strconv.Itoa(e.meta.maxAttempts)),
		header(HeaderAttempt, strconv.Itoa(attempt)),
		header(HeaderOrigin, e.origin().String()),
		header(HeaderQueue, e.part.queue),
		header(HeaderError, last),
		header(HeaderErrors, string(errs)),
	}
	// The job's metadata goes with it, so a retry's span still links to the
	// enqueue's.
	for k, v := range e.meta.metadata {
		hs = append(hs, header(k, v))
	}
	return hs
}

func (b *Backend) retry(e *entry, at time.Time) kafka.Message {
	hs := append(b.forwardHeaders(e, e.attempt), header(HeaderNotBefore, at.UTC().Format(time.RFC3339Nano)))
	return kafka.Message{Topic: e.part.queue + b.cfg.RetryTopicSuffix, Key: e.msg.Key, Value: e.msg.Value, Headers: hs}
}

func (b *Backend) deadLetter(e *entry, o queue.Outcome, now time.Time) kafka.Message {
	hs := append(b.forwardHeaders(e, e.attempt), header(HeaderOutcome, o.String()))
	return kafka.Message{Topic: e.part.queue + b.cfg.DeadLetterTopicSuffix, Key: e.msg.Key, Value: e.msg.Value, Headers: hs, Time: now}
}

func (b *Backend) ended(g *generation) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return g.ended
}

func isGenerationError(err error) bool {
	return errors.Is(err, kafka.IllegalGeneration) || errors.Is(err, kafka.UnknownMemberId) ||
		errors.Is(err, kafka.RebalanceInProgress) || errors.Is(err, kafka.FencedInstanceID)
}

// commit commits, for every partition of g, the offset of its first
// unfinished message. Concurrent calls share one commit: a caller that finds
// nothing new to commit returns at once.
func (b *Backend) commit(g *generation) error {
	b.commitMu.Lock()
	defer b.commitMu.Unlock()
	type advance struct {
		p  *partition
		wm int64
	}
	var adv []advance
	offsets := map[string]map[int]int64{}
	b.mu.Lock()
	for _, p := range g.parts {
		wm := p.watermark()
		if wm < 0 || wm <= p.committed {
			continue
		}
		if offsets[p.topic] == nil {
			offsets[p.topic] = map[int]int64{}
		}
		offsets[p.topic][p.id] = wm
		adv = append(adv, advance{p, wm})
	}
	b.mu.Unlock()
	if len(adv) == 0 {
		return nil
	}
	if err := g.kgen.CommitOffsets(offsets); err != nil {
		return fmt.Errorf("kafkaqueue: commit offsets of generation %d: %w", g.id, err)
	}
	b.mu.Lock()
	for _, a := range adv {
		if a.wm > a.p.committed {
			a.p.committed = a.wm
		}
	}
	b.mu.Unlock()
	return nil
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

// Wake returns a channel that receives a value when a message of queue may
// have become ready: one was fetched, a delay ran out, a partition or key
// was freed by a Finish, or the assignment changed.
func (b *Backend) Wake(ctx context.Context, q string) (<-chan struct{}, error) {
	if err := b.queueErr(q); err != nil {
		return nil, err
	}
	ch := make(chan struct{}, 1)
	// The first value goes in before ch is registered: once it is, notify
	// may fill ch's one slot at any moment, and a send after that would
	// block for ever.
	ch <- struct{}{}
	b.mu.Lock()
	if b.wakers[q] == nil {
		b.wakers[q] = make(map[chan struct{}]struct{})
	}
	b.wakers[q][ch] = struct{}{}
	b.mu.Unlock()
	context.AfterFunc(ctx, func() {
		b.mu.Lock()
		delete(b.wakers[q], ch)
		b.mu.Unlock()
	})
	return ch, nil
}

// Cancelled returns a channel that receives the leases of running jobs whose
// generation ended (their partitions were revoked), as soon as this member
// learns of it. A receiver that falls more than 4096 leases behind misses
// some; Heartbeat still reports them lost.
func (b *Backend) Cancelled(ctx context.Context) (<-chan queue.Lease, error) {
	ch := make(chan queue.Lease, 4096)
	b.mu.Lock()
	b.cancelled[ch] = struct{}{}
	b.mu.Unlock()
	context.AfterFunc(ctx, func() {
		b.mu.Lock()
		delete(b.cancelled, ch)
		b.mu.Unlock()
	})
	return ch, nil
}

// notify wakes the waiters of queue q. Callers hold b.mu.
func (b *Backend) notify(q string) {
	for ch := range b.wakers[q] {
		if len(ch) > 0 {
			continue // a wake-up is already pending
		}
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// armTimer wakes the waiters of q at at. Callers hold b.mu.
func (b *Backend) armTimer(q string, at time.Time) {
	if wt := b.timers[q]; wt != nil {
		if !wt.at.After(at) {
			return
		}
		wt.t.Stop()
	}
	wt := &wakeTimer{at: at}
	wt.t = time.AfterFunc(time.Until(at), func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.timers[q] == wt {
			delete(b.timers, q)
		}
		b.notify(q)
	})
	b.timers[q] = wt
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

// run follows the group from generation to generation.
func (b *Backend) run(ctx context.Context) {
	defer close(b.done)
	defer b.bg.Wait()
	b.bg.Add(1)
	go func() {
		defer b.bg.Done()
		b.commitLoop(ctx)
	}()
	for {
		kg, err := b.group.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, kafka.ErrGroupClosed) {
				return
			}
			level := slog.LevelWarn
			if errors.Is(err, kafka.RebalanceInProgress) {
				level = slog.LevelDebug // the usual answer while the group forms
			}
			b.log.Log(ctx, level, "kafkaqueue: joining the group failed; retrying", "group", b.cfg.GroupID, "err", err)
			continue
		}
		b.install(ctx, kg)
	}
}

// commitLoop commits whenever a Finish asks (one commit in flight at a time,
// each covering everything finished before it started) and every
// CommitInterval. A commit the broker refuses because the generation ended
// ends it here too.
func (b *Backend) commitLoop(ctx context.Context) {
	t := time.NewTicker(b.cfg.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-b.commitKick:
		}
		b.mu.Lock()
		g := b.gen
		b.mu.Unlock()
		if g == nil {
			continue
		}
		if err := b.commit(g); err != nil {
			if isGenerationError(err) {
				b.endGeneration(g, "commit refused")
				continue
			}
			b.log.Debug("kafkaqueue: background commit failed; retrying", "err", err)
		}
	}
}

func (b *Backend) install(ctx context.Context, kg *kafka.Generation) {
	g := &generation{id: int64(kg.ID), kgen: kg, byQueue: map[string][]*partition{}}
	g.ctx, g.cancel = context.WithCancel(ctx)
	for topic, as := range kg.Assignments {
		q, ok := b.queueOf[topic]
		if !ok {
			continue
		}
		for _, a := range as {
			p := newPartition(g, topic, q, a)
			if a.Offset >= 0 {
				p.committed = a.Offset
			}
			g.parts = append(g.parts, p)
		}
	}
	sort.Slice(g.parts, func(i, j int) bool {
		if g.parts[i].topic != g.parts[j].topic {
			return g.parts[i].topic < g.parts[j].topic
		}
		return g.parts[i].id < g.parts[j].id
	})
	for _, p := range g.parts {
		g.byQueue[p.queue] = append(g.byQueue[p.queue], p)
	}
	b.mu.Lock()
	b.gen = g
	for q := range b.wakers {
		b.notify(q)
	}
	b.mu.Unlock()
	b.log.Info("kafkaqueue: joined generation", "group", b.cfg.GroupID, "generation", g.id,
		"member", kg.MemberID, "partitions", len(g.parts))
	for _, p := range g.parts {
		kg.Start(func(ctx context.Context) { b.fetch(ctx, p) })
	}
	kg.Start(func(ctx context.Context) {
		<-ctx.Done()
		b.revoke(g)
	})
}

// revoke ends g when kafka-go ends it: its running jobs are lost and their
// leases sent to Cancelled, and what is done is committed if the coordinator
// still takes it.
func (b *Backend) revoke(g *generation) {
	n := b.endGeneration(g, "rebalance")
	// A commit may still be accepted while the coordinator prepares the
	// rebalance; it spares the next owner messages whose effect is done.
	if err := b.commit(g); err != nil {
		b.log.Debug("kafkaqueue: commit at revoke refused", "generation", g.id, "err", err)
	}
	b.log.Info("kafkaqueue: generation ended", "group", b.cfg.GroupID, "generation", g.id, "cancelled", n)
}

// endGeneration stops claiming from g and cancels its running jobs, at once
// and once; its fetchers then return, which makes kafka-go leave g and
// rejoin. It returns how many jobs it cancelled.
func (b *Backend) endGeneration(g *generation, why string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if g.ended {
		return 0
	}
	if why != "rebalance" {
		b.log.Warn("kafkaqueue: generation fenced out", "group", b.cfg.GroupID, "generation", g.id, "why", why)
	}
	g.ended = true
	g.cancel()
	if b.gen == g {
		b.gen = nil
	}
	var lost []queue.Lease
	for id, e := range b.running {
		if e.part.gen == g {
			lost = append(lost, queue.Lease{ID: id, Fence: g.id})
			delete(b.running, id)
		}
	}
	for ch := range b.cancelled {
		for _, l := range lost {
			select {
			case ch <- l:
			default:
			}
		}
	}
	for q := range b.wakers {
		b.notify(q)
	}
	for _, p := range g.parts {
		select {
		case p.space <- struct{}{}:
		default:
		}
	}
	return len(lost)
}

// fetch reads one partition into its buffer until the generation ends.
func (b *Backend) fetch(ctx context.Context, p *partition) {
	rc := b.cfg.readerConfig(p.topic)
	rc.Partition = p.id
	r := kafka.NewReader(rc)
	defer r.Close()
	if err := r.SetOffset(p.start); err != nil {
		b.log.Error("kafkaqueue: set offset", "topic", p.topic, "partition", p.id, "offset", p.start, "err", err)
		<-ctx.Done()
		return
	}
	for {
		b.mu.Lock()
		full := len(p.entries) >= b.cfg.MaxBufferedPerPartition
		ended := p.gen.ended
		b.mu.Unlock()
		if ended {
			return
		}
		if full {
			select {
			case <-ctx.Done():
				return
			case <-p.space:
			}
			continue
		}
		m, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			b.log.Warn("kafkaqueue: fetch failed; retrying", "topic", p.topic, "partition", p.id, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		b.mu.Lock()
		if p.gen.ended {
			b.mu.Unlock()
			return
		}
		p.add(m)
		b.notify(p.queue)
		b.mu.Unlock()
	}
}
