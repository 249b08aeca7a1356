package telemetry

import (
	"maps"
	"sync"
	"sync/atomic"

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
	// A workflow task's attempt: its workflow, its name, and the job IDs
	// of the tasks it depends on (whose attempts' spans carry them as
	// jobfence.job.id), so a trace backend finds the dependencies' spans.
	attrWorkflowID = attribute.Key("jobfence.workflow.id")
	attrTaskName   = attribute.Key("jobfence.workflow.task")
	attrDependsOn  = attribute.Key("jobfence.workflow.depends_on")
)

// series is what one queue (and kind) needs per measurement, built once:
// building attribute sets and options for every job would allocate on the
// worker's hot path.
type series struct {
	add     []metric.AddOption
	record  []metric.RecordOption
	observe metric.ObserveOption
	// counts are the attempts' outcomes of a queue and kind; a queue's
	// series counts none.
	counts   jobCounts
	spanName string
	// starts are the buffers attempt spans of the series start from.
	starts *attemptStarts
}

type seriesKey struct{ queue, kind string }

// seriesCache holds the series of each queue and kind seen; both are
// bounded by what the program registers and enqueues. It is looked up
// twice per job and written a handful of times in a worker's life, so
// readers load an immutable map (a Go map's hash of two strings is a
// fraction of what sync.Map's hash of an interface key costs) and a
// writer replaces it with a copy.
type seriesCache struct {
	m  atomic.Pointer[map[seriesKey]*series]
	mu sync.Mutex
	// build makes the series of a key not seen yet.
	build func(seriesKey) *series
}

func (c *seriesCache) get(queue, kind string) *series {
	k := seriesKey{queue, kind}
	if m := c.m.Load(); m != nil {
		if s, ok := (*m)[k]; ok {
			return s
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil {
		if s, ok := (*old)[k]; ok {
			return s
		}
	}
	m := make(map[seriesKey]*series, 1)
	if old != nil {
		maps.Copy(m, *old)
	}
	s := c.build(k)
	m[k] = s
	c.m.Store(&m)
	return s
}

// measureOpts returns the options that attribute a measurement to set.
func measureOpts(set attribute.Set) *series {
	o := metric.WithAttributeSet(set)
	return &series{add: []metric.AddOption{o}, record: []metric.RecordOption{o}, observe: o}
}
