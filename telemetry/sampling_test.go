package telemetry_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/telemetry"
	"github.com/jobfence/jobfence/worker"
)

// queueSampler is docs/observability.md's sampler that chooses by queue: every span
// of the queues in always, the rest left to another sampler. It can,
// because enqueue and attempt spans start with messaging.destination.name.
type queueSampler struct {
	always map[string]bool
	rest   sdktrace.Sampler
}

func (s queueSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	for _, a := range p.Attributes {
		if a.Key == "messaging.destination.name" && s.always[a.Value.AsString()] {
			return sdktrace.SamplingResult{
				Decision:   sdktrace.RecordAndSample,
				Tracestate: trace.SpanContextFromContext(p.ParentContext).TraceState(),
			}
		}
	}
	return s.rest.ShouldSample(p)
}

func (s queueSampler) Description() string { return "queueSampler" }

// TestSamplerChoosesByQueue: a sampler that keeps every span of one queue
// and none of another gets exactly that from a real worker: the attempt
// spans of the kept queue, each linked to its sampled enqueue, and no span
// of the other.
func TestSamplerChoosesByQueue(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.ParentBased(
		queueSampler{always: map[string]bool{"payments": true}, rest: sdktrace.NeverSample()})))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	opts := telemetry.Options{TracerProvider: tp}

	var pcfg pgqueue.Config
	if err := telemetry.PGQueue(&pcfg, opts); err != nil {
		t.Fatal(err)
	}
	jobs := pgqueue.New(db.Pool, pcfg)
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[Work]) error { return nil })
	wcfg := worker.Config{Queues: map[string]int{"payments": 4, "reports": 4}, PollInterval: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
	if err := telemetry.Worker(&wcfg, opts); err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(jobs, reg, wcfg)
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	for _, q := range []string{"payments", "reports"} {
		for range n {
			if _, err := jobs.Insert(ctx, Work{Mode: "ok"}, &queue.InsertOpts{Queue: q}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitAllCompleted(t, db.Pool, 2*n)
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}

	sends := map[trace.SpanID]bool{}
	byName := map[string]int{}
	for _, s := range rec.Ended() {
		byName[s.Name()]++
		if s.Name() == "send payments" {
			sends[s.SpanContext().SpanID()] = true
		}
	}
	if byName["send payments"] != n || byName["process payments"] != n {
		t.Errorf("spans %v: want %d enqueues and %d attempts of payments", byName, n, n)
	}
	if byName["send reports"] != 0 || byName["process reports"] != 0 {
		t.Errorf("spans %v: want none of reports", byName)
	}
	for _, s := range rec.Ended() {
		if s.Name() == "process payments" && (len(s.Links()) != 1 || !sends[s.Links()[0].SpanContext.SpanID()]) {
			t.Errorf("attempt span %s links %v, want its enqueue's span", s.SpanContext().SpanID(), s.Links())
		}
	}
}
