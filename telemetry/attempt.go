package telemetry

import (
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobfence/jobfence/queue"
)

// attemptShared is how many of an attempt span's start attributes every
// attempt of a queue and kind shares; attempt's own follow them.
const attemptShared = 5

// attemptStart holds the options that start one attempt's span. A busy
// worker starts tens of thousands of spans a second, and building their
// options per attempt (the attribute slice, the link, the closure and the
// slice WithLinks makes, the option slice around them) was a third of the
// allocations telemetry made per job: the options are built once per
// buffer, over arrays a job's values are written into. The SDK copies the
// attributes and links into the span's own configuration before Start
// returns, so a buffer can serve the next attempt as soon as Start has
// returned.
type attemptStart struct {
	// attrs are the span's start attributes: attemptShared shared ones,
	// then the job's id, attempt and fence. Given at start rather than set
	// on the span afterwards, they reach the span in one copy, and the
	// sampler sees them.
	attrs [attemptShared + 3]attribute.KeyValue
	link  [1]trace.Link

	kind, withAttrs, withLink, newRoot trace.SpanStartOption
	opts                               [4]trace.SpanStartOption
}

// attemptStarts pools a series' attemptStart buffers.
type attemptStarts struct{ pool sync.Pool }

func newAttemptStarts(shared [attemptShared]attribute.KeyValue) *attemptStarts {
	s := &attemptStarts{}
	s.pool.New = func() any {
		b := &attemptStart{}
		copy(b.attrs[:], shared[:])
		b.kind = trace.WithSpanKind(trace.SpanKindConsumer)
		b.withAttrs = trace.WithAttributes(b.attrs[:]...)
		b.withLink = trace.WithLinks(b.link[:]...)
		b.newRoot = trace.WithNewRoot()
		return b
	}
	return s
}

// get returns a buffer holding job's attributes and, if link is valid, a
// link to it; give it back with put once the span has started.
func (s *attemptStarts) get(job *queue.Job, link trace.SpanContext) *attemptStart {
	b := s.pool.Get().(*attemptStart)
	b.attrs[attemptShared] = attrJobID.Int64(job.ID)
	b.attrs[attemptShared+1] = attrAttempt.Int(job.Attempt)
	b.attrs[attemptShared+2] = attrFence.Int64(job.Fence)
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
