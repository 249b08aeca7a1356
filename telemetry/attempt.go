package telemetry

import (
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobfence/jobfence/queue"
)

// An attempt span's attributes come in two parts.
//
// The sampler's (messaging.system, messaging.destination.name and the
// job's kind) are given at start, so that a sampler can choose by queue
// or kind. The SDK copies start attributes into a span configuration of
// its own before it asks the sampler, for every span, sampled or not.
//
// The rest (the operation, the job's id, attempt and fence) are set only
// on a span that records. With 1 trace in 10 sampled, as a busy service
// would run, giving them at start as well made every attempt build a
// configuration for spans that nine times in ten record nothing, and a
// traced attempt copied them twice (BenchmarkWorkerHooksSampled10;
// docs/benchmarks/code.md).
const (
	// attemptSampled are the start attributes: system, queue, kind.
	attemptSampled = 3
	// attemptOp are the operation's attributes, set on a recording span
	// before the job's id, attempt and fence.
	attemptOp       = 2
	attemptRecorded = attemptOp + 3
)

// attemptStart holds the options that start one attempt's span and the
// attributes set on it if it records. A busy worker starts tens of
// thousands of spans a second, and building their options per attempt
// (the link, the closure and the slice WithLinks makes, the option slice
// around them) was a third of the allocations telemetry made per job: the
// options are built once per buffer, over arrays a job's values are
// written into. The SDK copies links into the span's configuration before
// Start returns, and SetAttributes copies attributes into the span, so a
// buffer can serve the next attempt as soon as they have returned.
type attemptStart struct {
	// recorded are the attributes set on a recording span: the shared
	// operation attributes, then the job's id, attempt and fence.
	recorded [attemptRecorded]attribute.KeyValue
	link     [1]trace.Link

	kind, withAttrs, withLink, newRoot trace.SpanStartOption
	opts                               [4]trace.SpanStartOption
}

// attemptStarts pools a series' attemptStart buffers.
type attemptStarts struct{ pool sync.Pool }

// newAttemptStarts returns the buffers of a series whose spans start with
// the sampler's attributes sampled and record the operation's op.
func newAttemptStarts(sampled [attemptSampled]attribute.KeyValue, op [attemptOp]attribute.KeyValue) *attemptStarts {
	s := &attemptStarts{}
	// One option for the series: WithAttributes keeps the slice it is
	// given, which no attempt writes to.
	withAttrs := trace.WithAttributes(sampled[:]...)
	s.pool.New = func() any {
		b := &attemptStart{}
		copy(b.recorded[:], op[:])
		b.kind = trace.WithSpanKind(trace.SpanKindConsumer)
		b.withAttrs = withAttrs
		b.withLink = trace.WithLinks(b.link[:]...)
		b.newRoot = trace.WithNewRoot()
		return b
	}
	return s
}

// get returns a buffer holding job's attributes and, if link is valid, a
// link to it; give it back with put once the span has started and its
// attributes are set.
func (s *attemptStarts) get(job *queue.Job, link trace.SpanContext) *attemptStart {
	b := s.pool.Get().(*attemptStart)
	b.recorded[attemptOp] = attrJobID.Int64(job.ID)
	b.recorded[attemptOp+1] = attrAttempt.Int(job.Attempt)
	b.recorded[attemptOp+2] = attrFence.Int64(job.Fence)
	b.link[0] = trace.Link{SpanContext: link}
	return b
}

func (s *attemptStarts) put(b *attemptStart) {
	b.link[0] = trace.Link{}
	s.pool.Put(b)
}

// options are the span's start options. newRoot makes the attempt a trace
// of its own, never a child of a span the worker's context carries; it is
// given only when that context carries one, since without one the span is
// a root anyway and the option costs the SDK a context of its own.
func (b *attemptStart) options(newRoot bool) []trace.SpanStartOption {
	o := append(b.opts[:0], b.kind, b.withAttrs)
	if b.link[0].SpanContext.IsValid() {
		o = append(o, b.withLink)
	}
	if newRoot {
		o = append(o, b.newRoot)
	}
	return o
}

// record sets the attempt's own attributes on span if it records.
func (b *attemptStart) record(span trace.Span) {
	if span.IsRecording() {
		span.SetAttributes(b.recorded[:]...)
	}
}
