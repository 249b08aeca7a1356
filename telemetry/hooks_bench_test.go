package telemetry_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

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

// BenchmarkWorkerHooksUnsampled is BenchmarkWorkerHooks with no trace
// sampled: what each of the attempts a sampler drops pays, for metrics,
// the link's parsing and an unsampled span.
func BenchmarkWorkerHooksUnsampled(b *testing.B) { benchWorkerHooks(b, 0) }

// BenchmarkSDKFloor measures what the SDK alone charges per traced attempt,
// with no jobfence code at all: start a consumer span, end it, and record
// the duration and wait histograms. "bare" gives the span nothing, the
// least any span per attempt costs; "specified" gives it the eight
// attributes and the link to the enqueue the Observability section names,
// as a straightforward instrumentation would. BenchmarkWorkerHooks cannot
// cost less than "bare"; set against the machine CPU a burn-down job costs
// (`jobfence bench` prints it), "bare" bounds from below what tracing every
// attempt costs a run bound by CPU.
func BenchmarkSDKFloor(b *testing.B) {
	mp, tp := benchProviders(b, 1)
	tracer := tp.Tracer("floor")
	meter := mp.Meter("floor")
	duration, err := meter.Float64Histogram("duration", metric.WithUnit("s"))
	if err != nil {
		b.Fatal(err)
	}
	wait, err := meter.Float64Histogram("wait", metric.WithUnit("s"))
	if err != nil {
		b.Fatal(err)
	}
	series := metric.WithAttributeSet(attribute.NewSet(attribute.String("jobfence.queue", "default"), attribute.String("jobfence.job.kind", "bench")))
	link := trace.Link{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, Remote: true,
	})}
	specified := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithLinks(link),
		trace.WithAttributes(
			attribute.String("messaging.system", "jobfence"),
			attribute.String("messaging.destination.name", "default"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.operation.name", "process"),
			attribute.String("jobfence.job.kind", "bench"),
			attribute.Int64("jobfence.job.id", 1),
			attribute.Int("jobfence.job.attempt", 1),
			attribute.Int64("jobfence.job.fence", 7),
		),
	}
	for _, bm := range []struct {
		name  string
		start []trace.SpanStartOption
	}{{"bare", nil}, {"specified", specified}} {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := cpuclock.Process()
			b.RunParallel(func(pb *testing.PB) {
				jobCtx, cancel := context.WithCancelCause(context.Background())
				defer cancel(nil)
				for pb.Next() {
					ctx, span := tracer.Start(jobCtx, "process default", bm.start...)
					span.End()
					duration.Record(ctx, 0.001, series)
					wait.Record(ctx, 0.001, series)
				}
			})
			b.ReportMetric(float64(cpuclock.Process()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// benchProviders is the SDK as a service installs it: spans batched to an
// exporter that drops them, sample as the root sampler's fraction under
// ParentBased, metrics aggregated for a reader that never collects.
func benchProviders(b *testing.B, sample float64) (*sdkmetric.MeterProvider, *sdktrace.TracerProvider) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(sample))))
	b.Cleanup(func() { _ = mp.Shutdown(context.Background()); _ = tp.Shutdown(context.Background()) })
	return mp, tp
}

func benchWorkerHooks(b *testing.B, sample float64) {
	mp, tp := benchProviders(b, sample)
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
