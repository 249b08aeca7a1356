package main

import (
	"context"
	"errors"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/telemetry"
	"github.com/jobfence/jobfence/worker"
)

// benchTelemetry is the OpenTelemetry SDK as a service would run it, with
// exporters that drop what they get: what --otel costs is the
// instrumentation and the SDK's own work (the sampled spans batched,
// metrics aggregated and collected every few seconds), not a network.
type benchTelemetry struct {
	mp   *sdkmetric.MeterProvider
	tp   *sdktrace.TracerProvider
	opts telemetry.Options
}

func newBenchTelemetry(sample float64) *benchTelemetry {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(
		sdkmetric.NewPeriodicReader(discardMetrics{}, sdkmetric.WithInterval(5*time.Second))))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(sample))))
	return &benchTelemetry{mp: mp, tp: tp, opts: telemetry.Options{MeterProvider: mp, TracerProvider: tp}}
}

// attach instruments a client's and a worker's configuration; t may be nil
// (no --otel).
func (t *benchTelemetry) attach(pc *pgqueue.Config, wc *worker.Config) error {
	if t == nil {
		return nil
	}
	if pc != nil {
		if err := telemetry.PGQueue(pc, t.opts); err != nil {
			return err
		}
	}
	if wc != nil {
		return telemetry.Worker(wc, t.opts)
	}
	return nil
}

func (t *benchTelemetry) shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return errors.Join(t.mp.Shutdown(ctx), t.tp.Shutdown(ctx))
}

// discardMetrics is a metric exporter that drops every collection.
type discardMetrics struct{}

func (discardMetrics) Temporality(k sdkmetric.InstrumentKind) metricdata.Temporality {
	return sdkmetric.DefaultTemporalitySelector(k)
}

func (discardMetrics) Aggregation(k sdkmetric.InstrumentKind) sdkmetric.Aggregation {
	return sdkmetric.DefaultAggregationSelector(k)
}

func (discardMetrics) Export(context.Context, *metricdata.ResourceMetrics) error { return nil }
func (discardMetrics) ForceFlush(context.Context) error                          { return nil }
func (discardMetrics) Shutdown(context.Context) error                            { return nil }
