// Package stampedetelemetry reports a stampede guard's counters
// (package stampede) as OpenTelemetry metrics. It is a package of its own
// so that a service that imports telemetry without stampede links no
// Redis client.
//
// See docs/observability.md.
package stampedetelemetry

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/jobfence/jobfence/stampede"
	"github.com/jobfence/jobfence/telemetry"
)

// StatsSource is a stampede guard: any *stampede.Guard[V].
type StatsSource interface {
	Stats() stampede.Stats
}

// Guard reports the counters of guard g as observable counters named
// jobfence.stampede.<counter> (calls, shared, hits, misses, computations,
// early_refreshes, waits, fail_opens, compute_timeouts, lock_lost,
// redis_errors, decode_errors) with the attribute guard=name. Call the
// returned function to stop reporting (for a guard that goes away).
func Guard(name string, g StatsSource, opts telemetry.Options) (stop func() error, err error) {
	if g == nil {
		return nil, errors.New("jobfence: stampedetelemetry: nil stampede guard")
	}
	m := opts.Meter()
	fields := []struct {
		name, desc string
		get        func(stampede.Stats) uint64
	}{
		{"calls", "Calls of Get.", func(s stampede.Stats) uint64 { return s.Calls }},
		{"shared", "Calls that shared another caller's flight in this process.", func(s stampede.Stats) uint64 { return s.Shared }},
		{"hits", "Flights answered by a stored value.", func(s stampede.Stats) uint64 { return s.Hits }},
		{"misses", "Flights that found no usable value.", func(s stampede.Stats) uint64 { return s.Misses }},
		{"computations", "Computations of a value.", func(s stampede.Stats) uint64 { return s.Computations }},
		{"early_refreshes", "Computations started early (XFetch) on a hit.", func(s stampede.Stats) uint64 { return s.EarlyRefreshes }},
		{"waits", "Flights that waited for the lock holder's value.", func(s stampede.Stats) uint64 { return s.Waits }},
		{"fail_opens", "Waits that ran out and computed without the lock.", func(s stampede.Stats) uint64 { return s.FailOpens }},
		{"compute_timeouts", "Computations given up after ComputeTimeout.", func(s stampede.Stats) uint64 { return s.ComputeTimeouts }},
		{"lock_lost", "Locks lost while their computation ran.", func(s stampede.Stats) uint64 { return s.LockLost }},
		{"redis_errors", "Failed Redis operations, worked around.", func(s stampede.Stats) uint64 { return s.RedisErrors }},
		{"decode_errors", "Stored entries that did not decode.", func(s stampede.Stats) uint64 { return s.DecodeErrors }},
	}
	obs := make([]metric.Int64ObservableCounter, len(fields))
	insts := make([]metric.Observable, len(fields))
	for i, f := range fields {
		c, err := m.Int64ObservableCounter("jobfence.stampede."+f.name, metric.WithUnit("{call}"), metric.WithDescription(f.desc))
		if err != nil {
			return nil, fmt.Errorf("jobfence: stampedetelemetry: %w", err)
		}
		obs[i], insts[i] = c, c
	}
	attrs := metric.WithAttributes(attribute.String("guard", name))
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := g.Stats()
		for i, f := range fields {
			o.ObserveInt64(obs[i], int64(f.get(s)), attrs)
		}
		return nil
	}, insts...)
	if err != nil {
		return nil, fmt.Errorf("jobfence: stampedetelemetry: %w", err)
	}
	return reg.Unregister, nil
}
