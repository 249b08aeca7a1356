package telemetry

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of every meter and tracer this
// package creates.
const ScopeName = "github.com/jobfence/jobfence/telemetry"

// Options chooses the providers telemetry reports to. The zero value uses
// the global ones, so a program that installs an SDK with otel.SetMeterProvider
// and otel.SetTracerProvider needs nothing more.
type Options struct {
	// MeterProvider creates the instruments. Default: otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// TracerProvider creates the spans. Default: otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Propagator carries a producer span's context to the jobs it
	// enqueued. Default: otel.GetTextMapPropagator(), or W3C Trace Context
	// when the global one carries nothing (as it does until a program sets
	// one): a job's link to its enqueue must not depend on that setting.
	// With W3C Trace Context (alone, or composed with Baggage) a worker
	// parses a job's traceparent itself, the same way and cheaper; any
	// other propagator extracts it.
	Propagator propagation.TextMapPropagator
}

func (o Options) withDefaults() Options {
	if o.MeterProvider == nil {
		o.MeterProvider = otel.GetMeterProvider()
	}
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	if o.Propagator == nil {
		o.Propagator = otel.GetTextMapPropagator()
		if len(o.Propagator.Fields()) == 0 {
			o.Propagator = propagation.TraceContext{}
		}
	}
	return o
}

func (o Options) meter() metric.Meter { return o.MeterProvider.Meter(ScopeName) }

// Meter returns the meter, under ScopeName, that telemetry's instruments
// are made with: from MeterProvider, or the global provider when it is
// nil. The subpackages for the other backends (kafkatelemetry,
// stampedetelemetry) report through it, as a backend of your own can.
func (o Options) Meter() metric.Meter { return o.withDefaults().meter() }

func (o Options) tracer() trace.Tracer { return o.TracerProvider.Tracer(ScopeName) }
