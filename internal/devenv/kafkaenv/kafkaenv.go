// Package kafkaenv provides a Kafka-protocol broker for tests, benchmarks
// and the demo: the one KAFKA_BROKERS names, or an in-process one
// (franz-go's kfake). It is apart from package devenv so that what starts
// only PostgreSQL or Redis links no Kafka code.
package kafkaenv

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Options says what an in-process broker has.
type Options struct {
	// Topics are created on the in-process broker with Partitions
	// partitions each (default 8). A real broker named by KAFKA_BROKERS is
	// expected to create topics itself or have them.
	Topics     []string
	Partitions int32
	// SessionTimeoutMin lowers the in-process broker's minimum group
	// session timeout (default 6s) for tests that wait out a session.
	SessionTimeoutMin time.Duration
}

// Broker is a broker Provide found or started.
type Broker struct {
	// Addrs are the broker addresses.
	Addrs []string
	// InProcess is true when Addrs is an in-process broker that Close
	// stops.
	InProcess bool

	cluster *kfake.Cluster
}

// Provide returns the brokers KAFKA_BROKERS names (comma-separated), or
// starts an in-process one.
func Provide(o Options) (*Broker, error) {
	if b := os.Getenv("KAFKA_BROKERS"); b != "" {
		return &Broker{Addrs: strings.Split(b, ",")}, nil
	}
	c, err := Start(o.Partitions, o.SessionTimeoutMin, o.Topics...)
	if err != nil {
		return nil, err
	}
	return &Broker{Addrs: c.ListenAddrs(), InProcess: true, cluster: c}, nil
}

// Close stops the in-process broker, if Provide started one. Calling it
// twice is safe.
func (b *Broker) Close() {
	if b == nil || b.cluster == nil {
		return
	}
	b.cluster.Close()
	b.cluster = nil
}

// Start starts an in-process Kafka-protocol broker (franz-go's kfake)
// on a free loopback port with topics of partitions partitions each
// (default 8). Topics not seeded are created when first produced to.
func Start(partitions int32, minSession time.Duration, topics ...string) (*kfake.Cluster, error) {
	if partitions <= 0 {
		partitions = 8
	}
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(int(partitions))}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(partitions, topics...))
	}
	if minSession > 0 {
		opts = append(opts, kfake.GroupMinSessionTimeout(minSession))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafkaenv: kafka: %w", err)
	}
	return c, nil
}
