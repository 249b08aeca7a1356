package telemetry

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/worker"
)

// secondsBuckets suit both handler times and queue waits, from a
// millisecond to an hour.
var secondsBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// batchBuckets suit claim and outcome batch sizes (up to FetchLimit and
// FinishBatch, 1000 by default).
var batchBuckets = []float64{1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500}

// workerTelemetry holds a worker's instruments.
type workerTelemetry struct {
	tracer trace.Tracer
	// link finds the span context of a job's enqueue in its metadata.
	link   func(map[string]string) trace.SpanContext
	jobs   seriesCache
	queues seriesCache

	rescued, endedSessions    metric.Int64Counter
	duration, wait            metric.Float64Histogram
	claimTime, finishTime     metric.Float64Histogram
	claimBatch, finishBatch   metric.Int64Histogram
	claimErrors, finishErrors metric.Int64Counter
}

// Worker attaches metrics, traces and trace ids in logs to the worker that
// cfg configures: call it before worker.New. It sets cfg.Hooks (calling
// any hooks already set: the user's JobStart after telemetry's, so it sees
// the span, and the user's JobEnd before telemetry's, which ends the span)
// and wraps cfg.Logger (slog.Default() when nil) with LogHandler.
func Worker(cfg *worker.Config, opts Options) error {
	if cfg == nil {
		return errors.New("jobfence: telemetry: nil worker config")
	}
	opts = opts.withDefaults()
	t, err := newWorkerTelemetry(opts)
	if err != nil {
		return err
	}
	prev := cfg.Hooks
	cfg.Hooks = worker.Hooks{
		JobStart: func(ctx context.Context, job *queue.Job) context.Context {
			ctx = t.jobStart(ctx, job)
			if prev.JobStart != nil {
				ctx = prev.JobStart(ctx, job)
			}
			return ctx
		},
		JobEnd: func(ctx context.Context, job *queue.Job, end worker.JobEnd) {
			if prev.JobEnd != nil {
				prev.JobEnd(ctx, job, end)
			}
			t.jobEnd(ctx, job, end)
		},
		Claim: func(ctx context.Context, c worker.ClaimInfo) {
			t.claim(ctx, c)
			if prev.Claim != nil {
				prev.Claim(ctx, c)
			}
		},
		Finish: func(ctx context.Context, f worker.FinishInfo) {
			t.finish(ctx, f)
			if prev.Finish != nil {
				prev.Finish(ctx, f)
			}
		},
		Rescue: func(ctx context.Context, n int) {
			t.rescued.Add(ctx, int64(n))
			if prev.Rescue != nil {
				prev.Rescue(ctx, n)
			}
		},
		EndedSessions: func(ctx context.Context, n int) {
			t.endedSessions.Add(ctx, int64(n))
			if prev.EndedSessions != nil {
				prev.EndedSessions(ctx, n)
			}
		},
		TaskTrace: func(ctx context.Context) []byte {
			if b := taskTrace(ctx); b != nil || prev.TaskTrace == nil {
				return b
			}
			return prev.TaskTrace(ctx)
		},
	}
	cfg.Logger = withTraceIDs(cfg.Logger)
	return nil
}

func newWorkerTelemetry(opts Options) (*workerTelemetry, error) {
	m := opts.meter()
	t := &workerTelemetry{tracer: opts.tracer(), link: enqueueLink(opts.Propagator)}
	var errs []error
	counterOf := func(unit, name, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	counter := func(name, desc string) metric.Int64Counter { return counterOf("{job}", name, desc) }
	seconds := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(secondsBuckets...))
		errs = append(errs, err)
		return h
	}
	batch := func(name, desc string) metric.Int64Histogram {
		h, err := m.Int64Histogram(name, metric.WithUnit("{job}"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(batchBuckets...))
		errs = append(errs, err)
		return h
	}
	t.rescued = counter("jobfence.jobs.rescued", "Jobs whose lease expired, moved back to run again by this worker.")
	t.endedSessions = counterOf("{session}", "jobfence.sessions.ended",
		"Database sessions this worker's maintenance ended because they held the queue's locks while their client, stopped mid-batch, sent nothing.")
	t.duration = seconds("jobfence.job.duration", "Handler run time of one attempt.")
	t.wait = seconds("jobfence.job.wait", "Time from when a job became ready (enqueued, scheduled or retried) to when an attempt claimed it, by the backend's clock.")
	t.claimTime = seconds("jobfence.claim.duration", "Round-trip time of a fetch loop's claim.")
	t.finishTime = seconds("jobfence.finish.duration", "Round-trip time of recording a batch of outcomes.")
	t.claimBatch = batch("jobfence.claim.jobs", "Jobs returned by one claim: a fetch loop's, or what a batch of outcomes claimed in the queue for the limit slots it freed.")
	t.finishBatch = batch("jobfence.finish.jobs", "Outcomes recorded in one round trip.")
	t.claimErrors = counterOf("{claim}", "jobfence.claim.errors", "Claims that failed.")
	t.finishErrors = counterOf("{batch}", "jobfence.finish.errors", "Outcome batches that failed to record (and are retried).")
	errs = append(errs, countInstruments(m, &t.jobs))
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("jobfence: telemetry: %w", err)
	}
	t.jobs.build = func(k seriesKey) *series {
		s := measureOpts(attribute.NewSet(attrQueue.String(k.queue), attrKind.String(k.kind)))
		s.spanName = "process " + k.queue
		s.starts = newAttemptStarts([attemptSampled]attribute.KeyValue{
			semconv.MessagingSystemKey.String("jobfence"),
			semconv.MessagingDestinationName(k.queue),
			attrJobKind.String(k.kind),
		}, [attemptOp]attribute.KeyValue{
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingOperationName("process"),
		})
		return s
	}
	t.queues.build = func(k seriesKey) *series {
		return measureOpts(attribute.NewSet(attrQueue.String(k.queue)))
	}
	return t, nil
}

// jobStart records the job's wait and starts its attempt's span, linked to
// the span that enqueued it.
func (t *workerTelemetry) jobStart(ctx context.Context, job *queue.Job) context.Context {
	s := t.jobs.get(job.Queue, job.Kind)
	if !job.AttemptedAt.IsZero() && !job.ScheduledAt.IsZero() {
		t.wait.Record(ctx, max(job.AttemptedAt.Sub(job.ScheduledAt).Seconds(), 0), s.record...)
	}
	var link trace.SpanContext
	if len(job.Metadata) > 0 {
		link = t.link(job.Metadata)
	}
	// Each attempt is a trace of its own, linked to its enqueue: never a
	// child of whatever span the context that started the worker carried.
	b := s.starts.get(job, link)
	ctx, span := t.tracer.Start(ctx, s.spanName, b.options(trace.SpanContextFromContext(ctx).IsValid())...)
	b.record(span)
	s.starts.put(b)
	if job.WorkflowID != "" && span.IsRecording() {
		span.SetAttributes(attrWorkflowID.String(job.WorkflowID), attrTaskName.String(job.TaskName), attrDependsOn.Int64Slice(job.DependsOn))
		// Links to the attempts that completed its dependencies, whose
		// traceparents their completions stored (taskTrace).
		for _, tp := range job.DependencyTraces {
			if sc := parseTraceparent(tp); sc.IsValid() {
				span.AddLink(trace.Link{SpanContext: sc})
			}
		}
	}
	return ctx
}

// taskTrace is the traceparent of the attempt span in ctx, stored with a
// workflow task's completion (worker.Hooks.TaskTrace); nil when the
// attempt is not traced.
func taskTrace(ctx context.Context) []byte {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return nil
	}
	return fmt.Appendf(nil, "00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
}

// jobEnd counts the attempt's outcome and ends its span.
func (t *workerTelemetry) jobEnd(ctx context.Context, job *queue.Job, end worker.JobEnd) {
	s := t.jobs.get(job.Queue, job.Kind)
	if end.Duration > 0 {
		t.duration.Record(ctx, end.Duration.Seconds(), s.record...)
	}
	span := trace.SpanFromContext(ctx)
	// Asked once: each call takes the span's lock.
	recording := span.IsRecording()
	switch {
	case end.Stale:
		s.counts[countStale].Add(1)
		if recording {
			span.SetAttributes(attrStale.Bool(true))
			span.AddEvent("jobfence.job.stale", trace.WithAttributes(attrFence.Int64(job.Fence)))
			span.SetStatus(codes.Error, "outcome refused: stale fence (the job was claimed again)")
		}
	case end.Stuck:
		s.counts[countStuck].Add(1)
		if recording {
			span.SetAttributes(attrLost.Bool(true))
			span.SetStatus(codes.Error, "handler kept running after its context ended: given up on, its job left to the rescuer")
		}
	case end.Lost:
		s.counts[countLost].Add(1)
		if recording {
			span.SetAttributes(attrLost.Bool(true))
			span.SetStatus(codes.Error, "job lost before its outcome was recorded")
		}
	default:
		if c, ok := outcomeCounted(end.Outcome); ok {
			s.counts[c].Add(1)
		}
		// Only a put-back pays for the error's inspection.
		if end.Outcome == queue.OutcomeSnooze && errors.Is(end.Err, queue.ErrUnknownKind) {
			s.counts[countUnknownKind].Add(1)
		}
	}
	if recording {
		// A completed attempt carries no outcome attribute: the SDK keeps
		// a span's attributes deduplicated with a map, and a ninth
		// attribute on every span makes that map (and the attribute
		// slice) outgrow their smallest size, a cost each of tens of
		// thousands of spans a second would pay.
		if end.Outcome != 0 && end.Outcome != queue.OutcomeComplete {
			span.SetAttributes(attrOutcome.String(end.Outcome.String()))
		}
		if end.Err != nil && (end.Panicked || isFailure(end.Outcome)) {
			var pe *worker.PanicError
			if errors.As(end.Err, &pe) {
				span.RecordError(end.Err, trace.WithAttributes(semconv.ExceptionStacktrace(pe.Stack)))
			} else {
				span.RecordError(end.Err)
			}
			span.SetStatus(codes.Error, end.Err.Error())
		}
	}
	span.End()
}

// isFailure reports outcomes that mean the handler failed, as opposed to
// a put-back (snooze) that is nobody's error.
func isFailure(o queue.Outcome) bool {
	return o == queue.OutcomeRetry || o == queue.OutcomeDiscard || o == queue.OutcomeCancel
}

// claim records a claim: its jobs, and for a fetch loop's, its round
// trip. The jobs a batch of outcomes claimed count with the others, so
// that the histogram's sum is every job claimed; their round trip is the
// outcomes', timed by jobfence.finish.duration.
func (t *workerTelemetry) claim(ctx context.Context, c worker.ClaimInfo) {
	s := t.queues.get(c.Queue, "")
	if !c.Finish {
		t.claimTime.Record(ctx, c.Duration.Seconds(), s.record...)
	}
	if c.Err != nil {
		t.claimErrors.Add(ctx, 1, s.add...)
		return
	}
	t.claimBatch.Record(ctx, int64(c.Jobs), s.record...)
}

func (t *workerTelemetry) finish(ctx context.Context, f worker.FinishInfo) {
	t.finishTime.Record(ctx, f.Duration.Seconds())
	if f.Err != nil {
		t.finishErrors.Add(ctx, 1)
		return
	}
	t.finishBatch.Record(ctx, int64(f.Jobs))
}
