package telemetry_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/jobfence/jobfence/internal/cpuclock"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/telemetry"
	"github.com/jobfence/jobfence/worker"
)

// BenchmarkWorkerHooks measures what telemetry adds to one attempt: the
// worker's JobStart and JobEnd hooks with the SDK installed as a service
// runs it (every trace sampled, spans batched to an exporter that drops
// them, metrics aggregated), for a job that carries the traceparent of
// the span that enqueued it, as every job enqueued with telemetry does.
func BenchmarkWorkerHooks(b *testing.B) { benchWorkerHooks(b, 1) }

// BenchmarkWorkerHooksSampled10 is BenchmarkWorkerHooks with one trace in
// ten sampled (ParentBased(TraceIDRatioBased(0.1)), as `jobfence bench
// --otel --otel-sample 0.1` runs): nine attempts in ten pay for metrics, the
// link's parsing and an unsampled span.
func BenchmarkWorkerHooksSampled10(b *testing.B) { benchWorkerHooks(b, 0.1) }

func benchWorkerHooks(b *testing.B, sample float64) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(sample))))
	b.Cleanup(func() { _ = mp.Shutdown(context.Background()); _ = tp.Shutdown(context.Background()) })
	var cfg worker.Config
	if err := telemetry.Worker(&cfg, telemetry.Options{MeterProvider: mp, TracerProvider: tp}); err != nil {
		b.Fatal(err)
	}
	// The metadata an instrumented enqueue stores with its jobs, from a
	// sampled producer span (an unsampled one stores none).
	always := sdktrace.NewTracerProvider()
	b.Cleanup(func() { _ = always.Shutdown(context.Background()) })
	_, meta, done := telemetry.InsertHook(telemetry.Options{MeterProvider: mp, TracerProvider: always})(context.Background(), []queue.EnqueueParams{{Kind: "bench"}})
	done(1, nil)
	if meta["traceparent"] == "" {
		b.Fatalf("metadata %v: no traceparent", meta)
	}
	now := time.Now()
	b.ReportAllocs()
	// The process's CPU time per attempt, the garbage collector's and the
	// span processor's included, is what a worker pays, and what other
	// load on a shared machine disturbs least.
	b.ResetTimer()
	cpu0 := cpuclock.Process()
	b.RunParallel(func(pb *testing.PB) {
		job := &queue.Job{ID: 1, Queue: "default", Kind: "bench", Attempt: 1, Fence: 7, ScheduledAt: now, AttemptedAt: now.Add(time.Millisecond), Metadata: meta}
		// The context the worker gives JobStart: its attempt's own, made
		// cancellable (see worker.execute).
		jobCtx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		for pb.Next() {
			ctx := cfg.Hooks.JobStart(jobCtx, job)
			cfg.Hooks.JobEnd(ctx, job, worker.JobEnd{Outcome: queue.OutcomeComplete, Duration: time.Microsecond})
		}
	})
	b.ReportMetric(float64(cpuclock.Process()-cpu0)/float64(b.N), "cpu-ns/op")
}
