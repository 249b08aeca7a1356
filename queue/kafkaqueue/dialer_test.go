package kafkaqueue

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/jobfence/jobfence/queue"
)

// TestDialerCarriesEveryConnection shows that Config.Dialer (where TLS and
// SASL are set) opens the producer's and the backend's connections: with a
// dialer that refuses, both fail with its error. TestPausedMemberIsFenced
// shows the same for the consumer group and the fetches, whose connections
// it freezes through the dialer.
func TestDialerCarriesEveryConnection(t *testing.T) {
	topic := uniqueName("jobs")
	c := newCluster(t, 1, topic)
	refused := errors.New("refused by the test dialer")
	d := &kafka.Dialer{
		Timeout: 5 * time.Second,
		DialFunc: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return nil, refused
		},
	}
	cfg := c.config(uniqueName("g"), topic)
	cfg.Dialer = d

	cl, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.Enqueue(ctx, queue.EnqueueParams{Queue: topic, Kind: "k"}); !errors.Is(err, refused) {
		t.Fatalf("Enqueue through a refusing dialer = %v, want its error", err)
	}
	if b, err := NewBackend(cfg); !errors.Is(err, refused) {
		if b != nil {
			b.Close()
		}
		t.Fatalf("NewBackend through a refusing dialer = %v, want its error", err)
	}
}
