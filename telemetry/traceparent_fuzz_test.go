package telemetry

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// FuzzParseTraceparent: for any traceparent and tracestate, the link an
// attempt parses is the span context propagation.TraceContext extracts
// from the same metadata, valid or not.
func FuzzParseTraceparent(f *testing.F) {
	for _, s := range [][2]string{
		{"00-" + tpTrace + "-" + tpSpan + "-01", ""},
		{"00-" + tpTrace + "-" + tpSpan + "-01", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"},
		{"00-" + tpTrace + "-" + tpSpan + "-01-", ""},
		{"01-" + tpTrace + "-" + tpSpan + "-ff-anything", "a=1,a=2"},
		{"ff-" + tpTrace + "-" + tpSpan + "-00", ""},
		{"00-" + tpTrace + "-" + tpSpan + "-0g", ""},
		{"00-00000000000000000000000000000000-" + tpSpan + "-01", ""},
		{"-", "="},
		{"", "a=b"},
	} {
		f.Add(s[0], s[1])
	}
	link := enqueueLink(propagation.TraceContext{})
	f.Fuzz(func(t *testing.T, parent, state string) {
		meta := map[string]string{"traceparent": parent, "tracestate": state}
		got := link(meta)
		want := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(meta)))
		if !got.Equal(want) || got.IsRemote() != want.IsRemote() {
			t.Fatalf("traceparent %q tracestate %q: parsed %v (remote %v), the propagator extracts %v (remote %v)",
				parent, state, got, got.IsRemote(), want, want.IsRemote())
		}
	})
}
