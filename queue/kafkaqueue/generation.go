package kafkaqueue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/jobfence/jobfence/queue"
)

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
