package telemetry

import (
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Attribute keys of jobfence's own, beside the messaging conventions'.
const (
	attrQueue   = attribute.Key("queue")
	attrKind    = attribute.Key("kind")
	attrJobID   = attribute.Key("jobfence.job.id")
	attrJobKind = attribute.Key("jobfence.job.kind")
	attrAttempt = attribute.Key("jobfence.job.attempt")
	attrFence   = attribute.Key("jobfence.job.fence")
	attrOutcome = attribute.Key("jobfence.job.outcome")
	attrStale   = attribute.Key("jobfence.job.stale")
	attrLost    = attribute.Key("jobfence.job.lost")
)

// series is what one queue (and kind) needs per measurement, built once:
// building attribute sets and options for every job would allocate on the
// worker's hot path.
type series struct {
	add      []metric.AddOption
	record   []metric.RecordOption
	spanName string
	// starts are the buffers attempt spans of the series start from.
	starts *attemptStarts
}

type seriesKey struct{ queue, kind string }

// seriesCache holds the series of each queue and kind seen; both are
// bounded by what the program registers and enqueues.
type seriesCache struct {
	m sync.Map // seriesKey -> *series
	// build makes the series of a key not seen yet.
	build func(seriesKey) *series
}

func (c *seriesCache) get(queue, kind string) *series {
	k := seriesKey{queue, kind}
	if s, ok := c.m.Load(k); ok {
		return s.(*series)
	}
	s, _ := c.m.LoadOrStore(k, c.build(k))
	return s.(*series)
}

// measureOpts returns the options that attribute a measurement to set.
func measureOpts(set attribute.Set) *series {
	o := metric.WithAttributeSet(set)
	return &series{add: []metric.AddOption{o}, record: []metric.RecordOption{o}}
}
