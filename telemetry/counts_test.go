package telemetry_test

import (
	"context"
	"fmt"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/telemetry"
	"github.com/jobfence/jobfence/worker"
)

// TestJobCounters checks the per-attempt counters through the worker's
// hooks: each outcome, stale, lost and stuck attempt lands in its
// counter's series of its queue and kind; two workers on one meter
// provider add up; a counter that counted nothing exports no series; and
// a delta reader gets what was counted since its last collection.
func TestJobCounters(t *testing.T) {
	cumulative := sdkmetric.NewManualReader()
	delta := sdkmetric.NewManualReader(sdkmetric.WithTemporalitySelector(func(sdkmetric.InstrumentKind) metricdata.Temporality {
		return metricdata.DeltaTemporality
	}))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(cumulative), sdkmetric.WithReader(delta))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	var cfgs [2]worker.Config
	for i := range cfgs {
		if err := telemetry.Worker(&cfgs[i], telemetry.Options{MeterProvider: mp}); err != nil {
			t.Fatal(err)
		}
	}
	run := func(cfg worker.Config, q, kind string, end worker.JobEnd, n int) {
		for i := range n {
			job := &queue.Job{ID: int64(i + 1), Queue: q, Kind: kind, Attempt: 1, Fence: 1}
			cfg.Hooks.JobEnd(cfg.Hooks.JobStart(context.Background(), job), job, end)
		}
	}
	run(cfgs[0], "default", "a", worker.JobEnd{Outcome: queue.OutcomeComplete}, 3)
	run(cfgs[1], "default", "a", worker.JobEnd{Outcome: queue.OutcomeComplete}, 4)
	run(cfgs[0], "default", "b", worker.JobEnd{Outcome: queue.OutcomeComplete}, 1)
	run(cfgs[0], "mail", "a", worker.JobEnd{Outcome: queue.OutcomeComplete}, 2)
	run(cfgs[0], "default", "a", worker.JobEnd{Outcome: queue.OutcomeRetry}, 5)
	run(cfgs[1], "default", "a", worker.JobEnd{Outcome: queue.OutcomeDiscard}, 1)
	run(cfgs[0], "default", "a", worker.JobEnd{Outcome: queue.OutcomeCancel}, 1)
	run(cfgs[1], "default", "a", worker.JobEnd{Outcome: queue.OutcomeSnooze}, 2)
	// A put-back for an unknown kind is a snooze, counted on its own too.
	unknown := fmt.Errorf("%w %q: no handler registered in worker w", queue.ErrUnknownKind, "c")
	run(cfgs[0], "default", "c", worker.JobEnd{Outcome: queue.OutcomeSnooze, Err: unknown}, 2)
	run(cfgs[1], "default", "c", worker.JobEnd{Outcome: queue.OutcomeSnooze, Err: unknown}, 1)
	// A stale or lost attempt counts as that, whatever outcome it meant.
	run(cfgs[0], "default", "a", worker.JobEnd{Outcome: queue.OutcomeComplete, Stale: true}, 2)
	run(cfgs[1], "default", "b", worker.JobEnd{Outcome: queue.OutcomeRetry, Lost: true}, 1)
	// A handler given up on (it ignored its context) counts as stuck alone.
	run(cfgs[0], "mail", "b", worker.JobEnd{Lost: true, Stuck: true, Err: worker.ErrHandlerStuck}, 1)

	want := map[string]map[[2]string]int64{
		"jobfence.jobs.completed":    {{"default", "a"}: 7, {"default", "b"}: 1, {"mail", "a"}: 2},
		"jobfence.jobs.retried":      {{"default", "a"}: 5},
		"jobfence.jobs.discarded":    {{"default", "a"}: 1},
		"jobfence.jobs.cancelled":    {{"default", "a"}: 1},
		"jobfence.jobs.snoozed":      {{"default", "a"}: 2, {"default", "c"}: 3},
		"jobfence.jobs.unknown_kind": {{"default", "c"}: 3},
		"jobfence.jobs.stale":        {{"default", "a"}: 2},
		"jobfence.jobs.lost":         {{"default", "b"}: 1},
		"jobfence.jobs.stuck":        {{"mail", "b"}: 1},
	}
	check := func(rm metricdata.ResourceMetrics, want map[string]map[[2]string]int64, temporality metricdata.Temporality) {
		t.Helper()
		for name, series := range want {
			m := find(t, rm, name)
			if m.Unit != "{job}" {
				t.Errorf("%s: unit %q, want {job}", name, m.Unit)
			}
			s, ok := m.Data.(metricdata.Sum[int64])
			if !ok || !s.IsMonotonic || s.Temporality != temporality {
				t.Errorf("%s: %T (monotonic %v, %v), want a monotonic %v sum", name, m.Data, s.IsMonotonic, s.Temporality, temporality)
			}
			got := map[[2]string]int64{}
			for _, p := range s.DataPoints {
				q, _ := p.Attributes.Value("queue")
				k, _ := p.Attributes.Value("kind")
				if p.Attributes.Len() != 2 {
					t.Errorf("%s: a point attributed %v, want queue and kind only", name, p.Attributes.ToSlice())
				}
				got[[2]string{q.AsString(), k.AsString()}] = p.Value
			}
			if len(got) != len(series) {
				t.Errorf("%s: series %v, want %v", name, got, series)
			}
			for k, v := range series {
				if got[k] != v {
					t.Errorf("%s{queue=%s,kind=%s} = %d, want %d", name, k[0], k[1], got[k], v)
				}
			}
		}
	}
	collect := func(r *sdkmetric.ManualReader) metricdata.ResourceMetrics {
		t.Helper()
		var rm metricdata.ResourceMetrics
		if err := r.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		return rm
	}
	check(collect(cumulative), want, metricdata.CumulativeTemporality)
	check(collect(delta), want, metricdata.DeltaTemporality)

	run(cfgs[1], "default", "a", worker.JobEnd{Outcome: queue.OutcomeComplete}, 10)
	want["jobfence.jobs.completed"][[2]string{"default", "a"}] = 17
	check(collect(cumulative), want, metricdata.CumulativeTemporality)
	rm := collect(delta)
	var since int64
	for _, p := range find(t, rm, "jobfence.jobs.completed").Data.(metricdata.Sum[int64]).DataPoints {
		if p.Attributes.Equals(ptr(attribute.NewSet(attribute.String("queue", "default"), attribute.String("kind", "a")))) {
			since = p.Value
		}
	}
	if since != 10 {
		t.Errorf("delta jobfence.jobs.completed{queue=default,kind=a} = %d, want the 10 since the last collection", since)
	}
	// Unlike a synchronous counter's, a series that counted nothing since
	// the last collection reports 0 to a delta reader (as docs/observability.md says).
	if pts := find(t, rm, "jobfence.jobs.retried").Data.(metricdata.Sum[int64]).DataPoints; len(pts) != 1 || pts[0].Value != 0 {
		t.Errorf("delta jobfence.jobs.retried after nothing was retried: %v, want one point of 0", pts)
	}
}

func ptr[T any](v T) *T { return &v }
