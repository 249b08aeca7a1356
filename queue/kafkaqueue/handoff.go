package kafkaqueue

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/jobfence/jobfence/queue"
)

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
	hs = limitHeaders(hs, e.meta.deadline, e.meta.timeout)
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
