package telemetry_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/telemetry"
	"github.com/jobfence/jobfence/worker"
)

// BenchmarkWorkerHooks measures what telemetry adds to one attempt: the
// worker's JobStart and JobEnd hooks with the SDK installed as a service
// runs it (every trace sampled, spans batched to an exporter that drops
// them, metrics aggregated), for a job that carries the traceparent of
// the span that enqueued it, as every job enqueued with telemetry does.
func BenchmarkWorkerHooks(b *testing.B) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = mp.Shutdown(context.Background()); _ = tp.Shutdown(context.Background()) })
	var cfg worker.Config
	if err := telemetry.Worker(&cfg, telemetry.Options{MeterProvider: mp, TracerProvider: tp}); err != nil {
		b.Fatal(err)
	}
	// The metadata an instrumented enqueue stores with its jobs.
	_, meta, done := telemetry.InsertHook(telemetry.Options{MeterProvider: mp, TracerProvider: tp})(context.Background(), []queue.EnqueueParams{{Kind: "bench"}})
	done(1, nil)
	if meta["traceparent"] == "" {
		b.Fatalf("metadata %v: no traceparent", meta)
	}
	now := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		job := &queue.Job{ID: 1, Queue: "default", Kind: "bench", Attempt: 1, Fence: 7, ScheduledAt: now, AttemptedAt: now.Add(time.Millisecond), Metadata: meta}
		for pb.Next() {
			ctx := cfg.Hooks.JobStart(context.Background(), job)
			cfg.Hooks.JobEnd(ctx, job, worker.JobEnd{Outcome: queue.OutcomeComplete, Duration: time.Microsecond})
		}
	})
}
