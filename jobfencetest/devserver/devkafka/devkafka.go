// Package devkafka gives a program a Kafka-protocol broker when none is
// configured: the one KAFKA_BROKERS names, or an in-process one (franz-go's
// kfake) removed by Close. It is package devserver's Kafka part, in a
// package of its own so that a program that starts only PostgreSQL or
// Redis links no Kafka code.
//
// It is for examples, local development and tests, never production.
package devkafka

import (
	"context"
	"fmt"

	"github.com/jobfence/jobfence/internal/devenv/kafkaenv"
)

// Options says what an in-process broker has.
type Options struct {
	// Topics are created on the in-process broker, with Partitions
	// partitions each (default 8). A broker named by KAFKA_BROKERS must
	// have them or create them itself.
	Topics     []string
	Partitions int32
}

// Broker is a broker Start found or started.
type Broker struct {
	// Brokers are the brokers' addresses.
	Brokers []string

	b *kafkaenv.Broker
}

// Start returns the brokers KAFKA_BROKERS (comma-separated) names, or
// starts an in-process broker. Close stops what Start started.
func Start(ctx context.Context, o Options) (*Broker, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("devkafka: %w", err)
	}
	b, err := kafkaenv.Provide(kafkaenv.Options{Topics: o.Topics, Partitions: o.Partitions})
	if err != nil {
		return nil, fmt.Errorf("devkafka: %w", err)
	}
	return &Broker{Brokers: b.Addrs, b: b}, nil
}

// Close stops the in-process broker Start started; a broker the
// environment named is left alone. Calling it twice is safe.
func (b *Broker) Close() error {
	if b == nil {
		return nil
	}
	b.b.Close()
	return nil
}
