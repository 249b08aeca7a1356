// Package kafkatelemetry instruments jobfence's Kafka backend
// (queue/kafkaqueue) with OpenTelemetry, as package telemetry does the
// PostgreSQL one. It is a package of its own so that a service that
// imports telemetry without Kafka links no Kafka client.
//
// See docs/observability.md.
package kafkatelemetry

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/metric"

	"github.com/jobfence/jobfence/queue/kafkaqueue"
	"github.com/jobfence/jobfence/telemetry"
)

// Instrument attaches producer spans to the kafkaqueue clients and
// backends that cfg configures (call it before kafkaqueue.NewClient or
// NewBackend): each enqueue becomes a span whose traceparent travels in the
// messages' headers. A hook already in cfg.InsertHook runs inside it.
func Instrument(cfg *kafkaqueue.Config, opts telemetry.Options) error {
	if cfg == nil {
		return errors.New("jobfence: kafkatelemetry: nil kafkaqueue config")
	}
	cfg.InsertHook = telemetry.WrapInsertHook(cfg.InsertHook, opts)
	return nil
}

// Backend reports a Kafka backend's group membership as observable
// gauges: jobfence.kafka.generation (the current group generation, the
// fence of its jobs: a rising value means rebalances),
// jobfence.kafka.partitions (partitions owned) and jobfence.kafka.commit_lag
// (finished messages whose offsets are not committed yet). Call the
// returned function to stop reporting.
func Backend(b *kafkaqueue.Backend, opts telemetry.Options) (stop func() error, err error) {
	if b == nil {
		return nil, errors.New("jobfence: kafkatelemetry: nil kafka backend")
	}
	m := opts.Meter()
	gen, err1 := m.Int64ObservableGauge("jobfence.kafka.generation", metric.WithUnit("{generation}"), metric.WithDescription("The consumer group generation this member is in (0 between generations)."))
	parts, err2 := m.Int64ObservableGauge("jobfence.kafka.partitions", metric.WithUnit("{partition}"), metric.WithDescription("Partitions this member owns."))
	lag, err3 := m.Int64ObservableGauge("jobfence.kafka.commit_lag", metric.WithUnit("{message}"), metric.WithDescription("Finished messages whose offsets are not committed yet."))
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, fmt.Errorf("jobfence: kafkatelemetry: %w", err)
	}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		a := b.Assignment()
		n := 0
		for _, ps := range a.Partitions {
			n += len(ps)
		}
		o.ObserveInt64(gen, a.Generation)
		o.ObserveInt64(parts, int64(n))
		o.ObserveInt64(lag, a.CommitLag)
		return nil
	}, gen, parts, lag)
	if err != nil {
		return nil, fmt.Errorf("jobfence: kafkatelemetry: %w", err)
	}
	return reg.Unregister, nil
}
