package telemetry_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/telemetry"
	"github.com/jobfence/jobfence/worker"
)

// TestEndedSessionsCounted: a session left mid-batch holding a lock on
// jobfence's tables, which the worker's maintenance ends, is counted in
// jobfence.sessions.ended.
func TestEndedSessionsCounted(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	in := newInstruments(t)
	jobs := pgqueue.New(db.Pool, pgqueue.Config{Logger: slog.New(slog.DiscardHandler), StalledSession: time.Second})
	pgtest.StallMidBatch(t, db, "BEGIN", "LOCK TABLE jobfence_queues IN ROW EXCLUSIVE MODE")
	wcfg := worker.Config{RescueInterval: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
	if err := telemetry.Worker(&wcfg, in.opts); err != nil {
		t.Fatal(err)
	}
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[Work]) error { return nil })
	w, err := worker.New(jobs, reg, wcfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testwatch.WaitFor(t, 30*time.Second, "the stalled session to be ended", func() bool { return w.Stats().EndedSessions > 0 })
	stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, p := range find(t, in.collect(t), "jobfence.sessions.ended").Data.(metricdata.Sum[int64]).DataPoints {
		n += p.Value
	}
	if n != 1 || w.Stats().EndedSessions != 1 {
		t.Fatalf("jobfence.sessions.ended = %d, Stats.EndedSessions = %d; want 1 and 1", n, w.Stats().EndedSessions)
	}
}
