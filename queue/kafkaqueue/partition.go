package kafkaqueue

import (
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/jobfence/jobfence/queue"
)

type entryState int

const (
	statePending entryState = iota // waiting to be claimed, maybe until notBefore
	stateRunning                   // claimed by a worker
	stateHandoff                   // being written to the retry or dead-letter topic
	stateDone                      // its effect is done: the offset may be committed
)

// entry is one fetched message of a partition.
type entry struct {
	part      *partition
	msg       kafka.Message
	meta      meta
	attempt   int // attempts made so far, earlier topics included
	inPlace   int // in-place retries so far in this partition
	notBefore time.Time
	errs      []queue.AttemptError
	state     entryState
	jobID     int64         // the running claim, when stateRunning
	out       kafka.Message // the retry or dead-letter copy, when stateHandoff
	slim      bool          // out has been slimmed (see slimCopy)
}

func (e *entry) origin() Origin {
	if e.meta.hasOrigin {
		return e.meta.origin
	}
	return Origin{Topic: e.msg.Topic, Partition: e.msg.Partition, Offset: e.msg.Offset}
}

// key returns the job's idempotency key, Origin.Key of its origin.
func (e *entry) key() string {
	if e.meta.hasOrigin {
		return e.meta.origin.Key()
	}
	return e.part.keyPrefix + strconv.FormatInt(e.msg.Offset, 10)
}

// partition is one assigned partition within one generation. All fields are
// guarded by Backend.mu.
type partition struct {
	gen       *generation
	topic     string
	queue     string // the queue (main topic) the partition serves
	id        int
	start     int64 // the assignment's start offset (may be kafka.FirstOffset)
	entries   []*entry
	keys      map[string][]*entry // unfinished entries per non-empty key, offset order
	running   int
	next      int64 // offset after the last fetched message; -1 before the first
	committed int64 // last committed offset; -1 before the first commit
	space     chan struct{}
	keyPrefix string // "kafka:<topic>:<partition>:"
}

func newPartition(g *generation, topic, queue string, a kafka.PartitionAssignment) *partition {
	return &partition{
		gen: g, topic: topic, queue: queue, id: a.ID, start: a.Offset,
		keys: make(map[string][]*entry), next: -1, committed: -1,
		space:     make(chan struct{}, 1),
		keyPrefix: "kafka:" + topic + ":" + strconv.Itoa(a.ID) + ":",
	}
}

func (p *partition) add(m kafka.Message) {
	e := &entry{part: p, msg: m, meta: parseMeta(m.Headers)}
	e.attempt = e.meta.attempt
	e.notBefore = e.meta.notBefore
	e.errs = e.meta.errors
	p.entries = append(p.entries, e)
	if len(m.Key) > 0 {
		k := string(m.Key)
		p.keys[k] = append(p.keys[k], e)
	}
	p.next = m.Offset + 1
}

// eligible reports whether e is the first unfinished entry of its key.
func (p *partition) eligible(e *entry) bool {
	if len(e.msg.Key) == 0 {
		return true
	}
	q := p.keys[string(e.msg.Key)]
	return len(q) > 0 && q[0] == e
}

// done marks e's effect done and drops finished entries from the head.
func (p *partition) done(e *entry) {
	e.state = stateDone
	if len(e.msg.Key) > 0 {
		k := string(e.msg.Key)
		q := p.keys[k]
		if len(q) > 0 && q[0] == e {
			q[0] = nil
			q = q[1:]
		} else {
			for i, x := range q {
				if x == e {
					q = append(q[:i:i], q[i+1:]...)
					break
				}
			}
		}
		if len(q) == 0 {
			delete(p.keys, k)
		} else {
			p.keys[k] = q
		}
	}
	n := 0
	for n < len(p.entries) && p.entries[n].state == stateDone {
		p.entries[n] = nil
		n++
	}
	if n > 0 {
		p.entries = p.entries[n:]
		select {
		case p.space <- struct{}{}:
		default:
		}
	}
}

// watermark is the offset to commit: every offset before it is done.
func (p *partition) watermark() int64 {
	if len(p.entries) > 0 {
		return p.entries[0].msg.Offset
	}
	return p.next
}
