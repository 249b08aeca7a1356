package telemetry

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

const (
	tpTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	tpSpan  = "00f067aa0ba902b7"
)

// TestEnqueueLink checks the traceparents (and tracestates) an attempt's
// link is parsed from, against what W3C Trace Context allows.
func TestEnqueueLink(t *testing.T) {
	link := enqueueLink(propagation.TraceContext{})
	for _, c := range []struct {
		name, parent, state string
		valid               bool
		flags               trace.TraceFlags
		wantState           string
	}{
		{name: "sampled", parent: "00-" + tpTrace + "-" + tpSpan + "-01", valid: true, flags: trace.FlagsSampled},
		{name: "not sampled", parent: "00-" + tpTrace + "-" + tpSpan + "-00", valid: true},
		{name: "random flag kept", parent: "00-" + tpTrace + "-" + tpSpan + "-03", valid: true, flags: trace.FlagsSampled | trace.FlagsRandom},
		{name: "tracestate", parent: "00-" + tpTrace + "-" + tpSpan + "-01", state: "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", valid: true, flags: trace.FlagsSampled, wantState: "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"},
		{name: "bad tracestate dropped", parent: "00-" + tpTrace + "-" + tpSpan + "-01", state: "not a list member", valid: true, flags: trace.FlagsSampled},
		{name: "later version with more fields", parent: "cc-" + tpTrace + "-" + tpSpan + "-09-what-comes-next", valid: true, flags: trace.FlagsSampled},
		{name: "none", parent: ""},
		{name: "version ff", parent: "ff-" + tpTrace + "-" + tpSpan + "-01"},
		{name: "version 00 with more fields", parent: "00-" + tpTrace + "-" + tpSpan + "-01-x"},
		{name: "version 00 reserved flags", parent: "00-" + tpTrace + "-" + tpSpan + "-04"},
		{name: "uppercase hex", parent: "00-" + "4BF92F3577B34DA6A3CE929D0E0E4736" + "-" + tpSpan + "-01"},
		{name: "zero trace id", parent: "00-00000000000000000000000000000000-" + tpSpan + "-01"},
		{name: "zero span id", parent: "00-" + tpTrace + "-0000000000000000-01"},
		{name: "short trace id", parent: "00-" + tpTrace[1:] + "-" + tpSpan + "-01"},
		{name: "not hex", parent: "00-" + tpTrace + "-" + tpSpan[:15] + "g-01"},
		{name: "no flags", parent: "00-" + tpTrace + "-" + tpSpan},
	} {
		t.Run(c.name, func(t *testing.T) {
			meta := map[string]string{"traceparent": c.parent}
			if c.state != "" {
				meta["tracestate"] = c.state
			}
			sc := link(meta)
			if sc.IsValid() != c.valid {
				t.Fatalf("link(%q) = %v, want valid %v", c.parent, sc, c.valid)
			}
			if !c.valid {
				return
			}
			if sc.TraceID().String() != tpTrace || sc.SpanID().String() != tpSpan || sc.TraceFlags() != c.flags || !sc.IsRemote() || sc.TraceState().String() != c.wantState {
				t.Errorf("link(%q, %q) = trace %s span %s flags %s remote %v state %q, want %s %s %s true %q", c.parent, c.state,
					sc.TraceID(), sc.SpanID(), sc.TraceFlags(), sc.IsRemote(), sc.TraceState().String(), tpTrace, tpSpan, c.flags, c.wantState)
			}
			if want := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(meta))); !sc.Equal(want) {
				t.Errorf("link = %v, the propagator extracts %v", sc, want)
			}
		})
	}
}

// TestEnqueueLinkPropagators checks which propagators the traceparent is
// parsed for directly, and that any other one is asked.
func TestEnqueueLinkPropagators(t *testing.T) {
	for _, c := range []struct {
		name string
		p    propagation.TextMapPropagator
		w3c  bool
	}{
		{"trace context", propagation.TraceContext{}, true},
		{"trace context and baggage", propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}), true},
		{"baggage only", propagation.Baggage{}, false},
		{"composite of baggage only", propagation.NewCompositeTextMapPropagator(propagation.Baggage{}), false},
		{"composite with another propagator", propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, headerPropagator{}), false},
		{"another propagator", headerPropagator{}, false},
	} {
		if got := w3cSpanContext(c.p); got != c.w3c {
			t.Errorf("%s: w3cSpanContext = %v, want %v", c.name, got, c.w3c)
		}
	}
	// A propagator of the user's own decides what a job's metadata links to.
	sc := enqueueLink(headerPropagator{})(map[string]string{"x-span": tpTrace + tpSpan})
	if sc.TraceID().String() != tpTrace || sc.SpanID().String() != tpSpan {
		t.Errorf("with a propagator of its own: link %v, want trace %s span %s", sc, tpTrace, tpSpan)
	}
}

// headerPropagator carries a span context in a header of its own, as a
// vendor's propagator would.
type headerPropagator struct{}

func (headerPropagator) Inject(context.Context, propagation.TextMapCarrier) {}

func (headerPropagator) Extract(ctx context.Context, c propagation.TextMapCarrier) context.Context {
	v := c.Get("x-span")
	if len(v) != 48 {
		return ctx
	}
	tid, err1 := trace.TraceIDFromHex(v[:32])
	sid, err2 := trace.SpanIDFromHex(v[32:])
	if err1 != nil || err2 != nil {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, Remote: true}))
}

func (headerPropagator) Fields() []string { return []string{"x-span"} }
