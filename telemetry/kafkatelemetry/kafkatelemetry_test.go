package kafkatelemetry_test

import (
	"context"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/kafkaqueue"
	"github.com/jobfence/jobfence/telemetry"
	"github.com/jobfence/jobfence/telemetry/kafkatelemetry"
)

// TestInstrument: the config's hook becomes a producer span that puts a
// traceparent in the messages' metadata, with the user's hook running
// inside it and its metadata kept.
func TestInstrument(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	var userSawSpan bool
	var userDone int64
	cfg := kafkaqueue.Config{InsertHook: func(ctx context.Context, _ []queue.EnqueueParams) (context.Context, map[string]string, func(int64, error)) {
		userSawSpan = trace.SpanContextFromContext(ctx).IsValid()
		return ctx, map[string]string{"tenant": "a"}, func(n int64, _ error) { userDone = n }
	}}
	if err := kafkatelemetry.Instrument(&cfg, telemetry.Options{TracerProvider: tp}); err != nil {
		t.Fatal(err)
	}
	var meta map[string]string
	n, err := queue.Observe(context.Background(), cfg.InsertHook, []queue.EnqueueParams{{Queue: "mail", Kind: "send"}}, func(_ context.Context, m map[string]string) (int64, error) {
		meta = m
		return 1, nil
	})
	if err != nil || n != 1 {
		t.Fatalf("Observe = %d, %v", n, err)
	}
	if !userSawSpan || userDone != 1 {
		t.Errorf("the user's hook: saw the span %v, learned %d inserted; want true, 1", userSawSpan, userDone)
	}
	if meta["tenant"] != "a" || !strings.HasPrefix(meta["traceparent"], "00-") {
		t.Errorf("metadata %v, want the user's tenant and a traceparent", meta)
	}
	spans := rec.Ended()
	if len(spans) != 1 || spans[0].Name() != "send mail" || spans[0].SpanKind() != trace.SpanKindProducer {
		t.Fatalf("spans %v, want one producer span \"send mail\"", spans)
	}
	if err := kafkatelemetry.Instrument(nil, telemetry.Options{}); err == nil || !strings.Contains(err.Error(), "nil kafkaqueue config") {
		t.Errorf("a nil config: %v, want an error naming it", err)
	}
	if _, err := kafkatelemetry.Backend(nil, telemetry.Options{}); err == nil || !strings.Contains(err.Error(), "nil kafka backend") {
		t.Errorf("a nil backend: %v, want an error naming it", err)
	}
}
