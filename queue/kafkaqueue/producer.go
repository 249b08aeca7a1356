package kafkaqueue

import (
	"context"
	"fmt"
	"sync"

	"github.com/segmentio/kafka-go"

	"github.com/jobfence/jobfence/queue"
)

// producer is a kafka.Writer that may be closed while writes are in flight.
// kafka-go's Writer.Close can wait for ever when a WriteMessages call runs
// at the same time (segmentio/kafka-go#1307: a partition writer created
// after Close looked is never closed), so close first refuses new writes,
// then waits for the running ones (each bounded by its context and the
// writer's attempts and timeouts), and only then closes the writer.
type producer struct {
	w *kafka.Writer

	mu      sync.Mutex
	closed  bool
	writing sync.WaitGroup // Add only under mu while !closed
}

func newProducer(cfg Config) *producer {
	return &producer{w: &kafka.Writer{
		Addr:         kafka.TCP(cfg.Brokers...),
		Balancer:     &kafka.Hash{},
		RequiredAcks: kafka.RequireAll,
		BatchTimeout: cfg.BatchTimeout,
		BatchSize:    1000,
		Transport:    cfg.transport(),
		ErrorLogger:  kafkaLogger{cfg.Logger},
	}}
}

// write writes msgs, or returns an error wrapping queue.ErrClosed once close
// has begun.
func (p *producer) write(ctx context.Context, msgs ...kafka.Message) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return fmt.Errorf("kafkaqueue: write: %w", queue.ErrClosed)
	}
	p.writing.Add(1)
	p.mu.Unlock()
	defer p.writing.Done()
	return p.w.WriteMessages(ctx, msgs...)
}

// close waits for the writes in flight, then flushes and closes the writer.
// Only the first call does anything.
func (p *producer) close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.writing.Wait()
	return p.w.Close()
}
