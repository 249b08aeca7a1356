package telemetry_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/telemetry"
	"github.com/jobfence/jobfence/worker"
)

// TestAttemptSpanIsRoot checks that an attempt's span starts a trace of
// its own, linked to its enqueue and carrying the job's attributes, both
// from the worker's usual context and from one that carries a span (a
// hook of the caller's that runs before telemetry's could put one there),
// and that a buffer reused from one attempt to the next carries nothing
// of the previous job.
func TestAttemptSpanIsRoot(t *testing.T) {
	in := newInstruments(t)
	var cfg worker.Config
	if err := telemetry.Worker(&cfg, in.opts); err != nil {
		t.Fatal(err)
	}
	_, meta, done := telemetry.InsertHook(in.opts)(context.Background(), []queue.EnqueueParams{{Kind: "k"}})
	done(1, nil)
	enqueue := in.spans.Ended()[0].SpanContext()

	parentCtx, parent := in.opts.TracerProvider.Tracer("test").Start(context.Background(), "caller")
	defer parent.End()
	now := time.Now()
	for i, ctx := range []context.Context{context.Background(), parentCtx, context.Background()} {
		job := &queue.Job{ID: int64(10 + i), Queue: "q", Kind: "k", Attempt: 1 + i, Fence: int64(100 + i), ScheduledAt: now, AttemptedAt: now}
		if i != 2 {
			job.Metadata = meta
		}
		jctx := cfg.Hooks.JobStart(ctx, job)
		cfg.Hooks.JobEnd(jctx, job, worker.JobEnd{Outcome: queue.OutcomeComplete, Duration: time.Millisecond})
		ended := in.spans.Ended()
		s := ended[len(ended)-1]
		if s.Parent().IsValid() || s.SpanContext().TraceID() == parent.SpanContext().TraceID() || s.SpanContext().TraceID() == enqueue.TraceID() {
			t.Errorf("attempt %d: span in trace %s with parent %v, want a root of a trace of its own", i, s.SpanContext().TraceID(), s.Parent())
		}
		wantLinks := 1
		if i == 2 {
			wantLinks = 0
		}
		if got := s.Links(); len(got) != wantLinks || (wantLinks == 1 && got[0].SpanContext.SpanID() != enqueue.SpanID()) {
			t.Errorf("attempt %d: links %v, want %d to the enqueue span %s", i, got, wantLinks, enqueue.SpanID())
		}
		want := map[attribute.Key]int64{"jobfence.job.id": job.ID, "jobfence.job.attempt": int64(job.Attempt), "jobfence.job.fence": job.Fence}
		for _, a := range s.Attributes() {
			if v, ok := want[a.Key]; ok {
				if a.Value.AsInt64() != v {
					t.Errorf("attempt %d: %s = %v, want %d", i, a.Key, a.Value.String(), v)
				}
				delete(want, a.Key)
			}
		}
		if len(want) > 0 {
			t.Errorf("attempt %d: span lacks %v (attributes %v)", i, want, s.Attributes())
		}
	}
}

// kindSampler drops the traces of one job kind, choosing by the attribute
// an attempt span starts with, and keeps the attribute keys it was shown.
type kindSampler struct {
	drop string
	seen []attribute.Key
}

func (s *kindSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	s.seen = s.seen[:0]
	d := sdktrace.RecordAndSample
	for _, a := range p.Attributes {
		s.seen = append(s.seen, a.Key)
		if a.Key == "jobfence.job.kind" && a.Value.AsString() == s.drop {
			d = sdktrace.Drop
		}
	}
	return sdktrace.SamplingResult{Decision: d}
}

func (s *kindSampler) Description() string { return "kindSampler" }

// TestAttemptSpanSampler: a sampler sees an attempt's system, queue and
// kind, so a user can sample by queue or kind; the job's own attributes
// and the operation are set once the span records (giving them at start
// cost every unsampled attempt their copy), so a recorded span carries
// all of them and a dropped one none.
func TestAttemptSpanSampler(t *testing.T) {
	sampler := &kindSampler{drop: "noisy"}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	var cfg worker.Config
	if err := telemetry.Worker(&cfg, telemetry.Options{TracerProvider: tp}); err != nil {
		t.Fatal(err)
	}
	for i, kind := range []string{"noisy", "billing"} {
		job := &queue.Job{ID: int64(i + 1), Queue: "q", Kind: kind, Attempt: 2, Fence: 9}
		ctx := cfg.Hooks.JobStart(context.Background(), job)
		cfg.Hooks.JobEnd(ctx, job, worker.JobEnd{Outcome: queue.OutcomeComplete})
		seen := attribute.NewSet(attrsOf(sampler.seen)...)
		for _, k := range []attribute.Key{"messaging.system", "messaging.destination.name", "jobfence.job.kind"} {
			if !seen.HasValue(k) {
				t.Errorf("%s: the sampler was not shown %s (it saw %v)", kind, k, sampler.seen)
			}
		}
	}
	ended := rec.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans recorded, want 1 (the noisy kind's dropped by the sampler)", len(ended))
	}
	attrs := attribute.NewSet(ended[0].Attributes()...)
	for k, want := range map[attribute.Key]string{
		"messaging.system": "jobfence", "messaging.destination.name": "q", "messaging.operation.type": "process",
		"messaging.operation.name": "process", "jobfence.job.kind": "billing",
		"jobfence.job.id": "2", "jobfence.job.attempt": "2", "jobfence.job.fence": "9",
	} {
		if v, _ := attrs.Value(k); v.String() != want {
			t.Errorf("recorded span: %s = %q, want %q", k, v.String(), want)
		}
	}
}

// attrsOf makes keys into attributes, so a set can tell which it holds.
func attrsOf(keys []attribute.Key) []attribute.KeyValue {
	kv := make([]attribute.KeyValue, len(keys))
	for i, k := range keys {
		kv[i] = k.Bool(true)
	}
	return kv
}
