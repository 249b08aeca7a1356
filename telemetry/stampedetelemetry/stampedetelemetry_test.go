package stampedetelemetry_test

import (
	"context"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/jobfence/jobfence/stampede"
	"github.com/jobfence/jobfence/telemetry"
	"github.com/jobfence/jobfence/telemetry/stampedetelemetry"
)

// fixedStats is a guard whose counters are known.
type fixedStats stampede.Stats

func (f fixedStats) Stats() stampede.Stats { return stampede.Stats(f) }

// TestGuard reads a guard's counters at collection, until stopped.
func TestGuard(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	opts := telemetry.Options{MeterProvider: mp}

	stop, err := stampedetelemetry.Guard("prices", fixedStats{Calls: 1000, Computations: 1, Waits: 999}, opts)
	if err != nil {
		t.Fatal(err)
	}
	got := collect(t, reader)
	for name, want := range map[string]int64{"jobfence.stampede.calls": 1000, "jobfence.stampede.computations": 1, "jobfence.stampede.waits": 999, "jobfence.stampede.hits": 0} {
		v, ok := got[name]
		if !ok {
			t.Errorf("no %s for guard prices", name)
		} else if v != want {
			t.Errorf("%s = %d, want %d", name, v, want)
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if after := collect(t, reader); len(after) != 0 {
		t.Errorf("still reported after stop: %v", after)
	}
	if _, err := stampedetelemetry.Guard("nil", nil, opts); err == nil || !strings.Contains(err.Error(), "nil stampede guard") {
		t.Errorf("a nil guard: %v, want an error naming it", err)
	}
}

// collect returns the counters reported for guard "prices", by name.
func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != telemetry.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, telemetry.ScopeName)
		}
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, p := range sum.DataPoints {
				if v, _ := p.Attributes.Value("guard"); v.AsString() == "prices" {
					out[m.Name] += p.Value
				}
			}
		}
	}
	return out
}
