package telemetry

import (
	"context"
	"reflect"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// W3C Trace Context's metadata keys.
const (
	traceparentKey = "traceparent"
	tracestateKey  = "tracestate"
)

// enqueueLink returns a function that finds, in a job's metadata, the span
// context of the span that enqueued it. With a propagator that reads the
// span context only from W3C Trace Context (the default), it parses the
// traceparent directly: propagator.Extract would build a context around
// the span context only for the worker to take it out again, two
// allocations and a third of the lookup's time on every attempt of a busy
// worker. Any other propagator is asked.
func enqueueLink(p propagation.TextMapPropagator) func(map[string]string) trace.SpanContext {
	if w3cSpanContext(p) {
		return func(meta map[string]string) trace.SpanContext {
			sc := parseTraceparent(meta[traceparentKey])
			if !sc.IsValid() {
				return trace.SpanContext{}
			}
			if ts := meta[tracestateKey]; ts != "" {
				// As TraceContext does: a tracestate that does not parse is
				// dropped, and the traceparent kept.
				state, err := trace.ParseTraceState(ts)
				if err == nil {
					sc = sc.WithTraceState(state)
				}
			}
			return sc
		}
	}
	return func(meta map[string]string) trace.SpanContext {
		return trace.SpanContextFromContext(p.Extract(context.Background(), propagation.MapCarrier(meta)))
	}
}

// w3cSpanContext reports whether the span context p extracts comes from
// W3C Trace Context alone: p is propagation.TraceContext, or a composite
// (propagation.NewCompositeTextMapPropagator) of TraceContext and
// propagation.Baggage, which extracts only baggage, something an attempt's
// link does not carry. The composite's members are not exported; it is
// read by reflection, and anything that does not look exactly like it is
// treated as another propagator.
func w3cSpanContext(p propagation.TextMapPropagator) bool {
	if _, ok := p.(propagation.TraceContext); ok {
		return true
	}
	v := reflect.ValueOf(p)
	if v.Kind() != reflect.Slice || v.Type().PkgPath() != reflect.TypeFor[propagation.TraceContext]().PkgPath() {
		return false
	}
	tc := false
	for i := range v.Len() {
		e := v.Index(i)
		if !e.CanInterface() {
			return false
		}
		switch e.Interface().(type) {
		case propagation.TraceContext:
			tc = true
		case propagation.Baggage:
		default:
			return false
		}
	}
	return tc
}

// parseTraceparent parses a W3C traceparent header as
// propagation.TraceContext does (FuzzParseTraceparent holds it to that):
// version 00 is exactly version-traceid-spanid-flags with flags 00 to 03,
// later versions (up to fe) may add fields after the flags, lowercase hex
// only, an all-zero trace or span id is invalid, and of the flags only
// sampled and random are kept. It returns an invalid SpanContext when h is
// none of that. The span context is remote, with no trace state.
func parseTraceparent(h string) trace.SpanContext {
	if h == "" {
		return trace.SpanContext{}
	}
	var ver [1]byte
	if !hexPart(ver[:], &h, 2) || ver[0] == 0xff {
		return trace.SpanContext{}
	}
	var scc trace.SpanContextConfig
	if !hexPart(scc.TraceID[:], &h, 32) || !hexPart(scc.SpanID[:], &h, 16) {
		return trace.SpanContext{}
	}
	var flags [1]byte
	if !hexPart(flags[:], &h, 2) {
		return trace.SpanContext{}
	}
	if ver[0] == 0 && (h != "" || flags[0] > 3) {
		return trace.SpanContext{}
	}
	scc.TraceFlags = trace.TraceFlags(flags[0]) & (trace.FlagsSampled | trace.FlagsRandom)
	scc.Remote = true
	sc := trace.NewSpanContext(scc)
	if !sc.IsValid() {
		return trace.SpanContext{}
	}
	return sc
}

// hexPart decodes the field of *h up to the next "-" (or its end) into
// dst, which takes n lowercase hex digits, and leaves the rest in *h.
func hexPart(dst []byte, h *string, n int) bool {
	part, rest, _ := strings.Cut(*h, "-")
	*h = rest
	if len(part) != n {
		return false
	}
	for i := 0; i < n; i += 2 {
		hi, ok1 := lowerHex(part[i])
		lo, ok2 := lowerHex(part[i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i/2] = hi<<4 | lo
	}
	return true
}

func lowerHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
