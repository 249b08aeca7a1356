package telemetry_test

import (
	"context"
	"log/slog"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/telemetry"
	"github.com/jobfence/jobfence/worker"
)

// Example attaches telemetry to a client and a worker, reporting to the
// global providers (install the OpenTelemetry SDK in main for them to
// record anything).
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()

	var pgCfg pgqueue.Config
	if err := telemetry.PGQueue(&pgCfg, telemetry.Options{}); err != nil {
		panic(err)
	}
	jobs := pgqueue.New(pool, pgCfg)

	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[Work]) error { return nil })
	cfg := worker.Config{Queues: map[string]int{"default": 10}}
	if err := telemetry.Worker(&cfg, telemetry.Options{}); err != nil {
		panic(err)
	}
	w, err := worker.New(jobs, reg, cfg)
	if err != nil {
		panic(err)
	}
	_ = w // w.Start(ctx) ... w.Stop(ctx)
}

// ExampleLogHandler adds the trace of the record's context to each line.
func ExampleLogHandler() {
	text := slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // a fixed output
			}
			return a
		},
	})
	log := slog.New(telemetry.LogHandler(text))

	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:  trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	log.InfoContext(ctx, "charged", "job", 42)
	log.Info("no span, no trace id")
	// Output:
	// level=INFO msg=charged job=42 trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=00f067aa0ba902b7
	// level=INFO msg="no span, no trace id"
}
