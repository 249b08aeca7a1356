package devenv

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Options says which services Start should provide.
type Options struct {
	// Postgres provides DatabaseURL.
	Postgres bool
	// Redis provides RedisURL.
	Redis bool
	// Kafka provides KafkaBrokers.
	Kafka bool
	// KafkaTopics are created on the in-process broker with
	// KafkaPartitions partitions each (default 8). A real broker named by
	// KAFKA_BROKERS is expected to create topics itself or have them.
	KafkaTopics     []string
	KafkaPartitions int32
	// KafkaSessionTimeoutMin lowers the in-process broker's minimum group
	// session timeout (default 6s) for tests that wait out a session.
	KafkaSessionTimeoutMin time.Duration
}

// Env holds the services' addresses: those named by DATABASE_URL, REDIS_URL
// and KAFKA_BROKERS when set, otherwise throwaway ones started by Start.
type Env struct {
	DatabaseURL  string
	RedisURL     string
	KafkaBrokers []string

	// KafkaInProcess is true when KafkaBrokers is an in-process kfake
	// broker that Close stops.
	KafkaInProcess bool

	stops []func()
}

// Start provides the services o asks for. Close stops the ones it started.
func Start(ctx context.Context, o Options) (*Env, error) {
	e := &Env{}
	if o.Postgres {
		if u := os.Getenv("DATABASE_URL"); u != "" {
			e.DatabaseURL = u
		} else {
			pg, err := StartPostgres(ctx)
			if err != nil {
				e.Close()
				return nil, err
			}
			e.DatabaseURL = pg.URL
			e.stops = append(e.stops, func() { pg.Stop() })
		}
	}
	if o.Redis {
		if u := os.Getenv("REDIS_URL"); u != "" {
			e.RedisURL = u
		} else {
			r, err := StartRedis(ctx)
			if err != nil {
				e.Close()
				return nil, err
			}
			e.RedisURL = r.URL
			e.stops = append(e.stops, func() { r.Stop() })
		}
	}
	if o.Kafka {
		if b := os.Getenv("KAFKA_BROKERS"); b != "" {
			e.KafkaBrokers = strings.Split(b, ",")
		} else {
			c, err := StartKafka(o.KafkaPartitions, o.KafkaSessionTimeoutMin, o.KafkaTopics...)
			if err != nil {
				e.Close()
				return nil, err
			}
			e.KafkaBrokers = c.ListenAddrs()
			e.KafkaInProcess = true
			e.stops = append(e.stops, c.Close)
		}
	}
	return e, nil
}

// StartKafka starts an in-process Kafka-protocol broker (franz-go's kfake)
// on a free loopback port with topics of partitions partitions each
// (default 8). Topics not seeded are created when first produced to.
func StartKafka(partitions int32, minSession time.Duration, topics ...string) (*kfake.Cluster, error) {
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
		return nil, fmt.Errorf("devenv: kafka: %w", err)
	}
	return c, nil
}

// Close stops, in reverse order, the services Start started.
func (e *Env) Close() error {
	if e == nil {
		return nil
	}
	for i := len(e.stops) - 1; i >= 0; i-- {
		e.stops[i]()
	}
	e.stops = nil
	return nil
}
