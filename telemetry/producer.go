package telemetry

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// PGQueue attaches producer spans to the pgqueue client that cfg
// configures: call it before pgqueue.New. Every enqueue call becomes a
// span, and its W3C traceparent is stored in each job's metadata, so the
// spans of the job's attempts link back to it. A hook already in
// cfg.InsertHook runs inside telemetry's.
func PGQueue(cfg *pgqueue.Config, opts Options) error {
	if cfg == nil {
		return errors.New("jobfence: telemetry: nil pgqueue config")
	}
	cfg.InsertHook = WrapInsertHook(cfg.InsertHook, opts)
	return nil
}

// InsertHook returns a queue.InsertHook that starts a producer span per
// enqueue call ("send <queue>", with messaging.batch.message_count for more
// than one job) and, when the span is sampled, adds its context, through
// the propagator, to the jobs' metadata. PGQueue and kafkatelemetry.Instrument
// install it; use it (or WrapInsertHook) for a backend of your own.
func InsertHook(opts Options) queue.InsertHook {
	opts = opts.withDefaults()
	tracer, prop := opts.tracer(), opts.Propagator
	return func(ctx context.Context, ps []queue.EnqueueParams) (context.Context, map[string]string, func(int64, error)) {
		q := queue.DefaultQueue
		if len(ps) > 0 && ps[0].Queue != "" {
			q = ps[0].Queue
		}
		attrs := []attribute.KeyValue{
			semconv.MessagingSystemKey.String("jobfence"),
			semconv.MessagingOperationTypeSend,
			semconv.MessagingOperationName("send"),
			semconv.MessagingDestinationName(q),
		}
		if len(ps) == 1 {
			attrs = append(attrs, attrJobKind.String(ps[0].Kind))
		} else {
			attrs = append(attrs, semconv.MessagingBatchMessageCount(len(ps)))
		}
		ctx, span := tracer.Start(ctx, "send "+q, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
		// Only a sampled span's context is worth storing with the jobs: the
		// attempts link to it rather than inherit its sampling decision, and
		// an unsampled one would cost every job its bytes (written, read
		// and parsed) for a trace no one records.
		var meta map[string]string
		if span.SpanContext().IsSampled() {
			meta = map[string]string{}
			prop.Inject(ctx, propagation.MapCarrier(meta))
		}
		return ctx, meta, func(n int64, err error) {
			span.SetAttributes(attribute.Int64("jobfence.jobs.inserted", n))
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
		}
	}
}

// WrapInsertHook returns InsertHook(opts) with inner, when not nil,
// running inside it: what PGQueue does to a config's hook, for the
// backends telemetry's subpackages instrument and for a backend of your
// own.
func WrapInsertHook(inner queue.InsertHook, opts Options) queue.InsertHook {
	outer := InsertHook(opts)
	if inner == nil {
		return outer
	}
	return func(ctx context.Context, ps []queue.EnqueueParams) (context.Context, map[string]string, func(int64, error)) {
		ctx, m1, done1 := outer(ctx, ps)
		ctx, m2, done2 := inner(ctx, ps)
		return ctx, queue.MergeMetadata(m2, m1), func(n int64, err error) {
			done2(n, err)
			done1(n, err)
		}
	}
}
