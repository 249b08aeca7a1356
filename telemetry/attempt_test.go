package telemetry_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

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
					t.Errorf("attempt %d: %s = %v, want %d", i, a.Key, a.Value.Emit(), v)
				}
				delete(want, a.Key)
			}
		}
		if len(want) > 0 {
			t.Errorf("attempt %d: span lacks %v (attributes %v)", i, want, s.Attributes())
		}
	}
}
