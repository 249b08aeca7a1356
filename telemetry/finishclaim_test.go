package telemetry_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/telemetry"
	"github.com/jobfence/jobfence/worker"
)

// TestClaimsByOutcomesCounted: under a concurrency limit a worker's
// outcomes claim most of its jobs (queue.FinishClaimer), and the claim
// metrics count them with the fetch loops' claims: jobfence.claim.jobs
// sums to every job run, while jobfence.claim.duration times only the
// fetch loops' round trips (the outcomes' are jobfence.finish.duration's);
// every job has its wait recorded and its attempt span.
func TestClaimsByOutcomesCounted(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	in := newInstruments(t)
	jobs := pgqueue.New(db.Pool, pgqueue.Config{Logger: slog.New(slog.DiscardHandler)})
	const q, limit, n = "held", 3, 60
	if err := jobs.SetLimit(ctx, pgqueue.Limit{Name: q, Queue: q, Concurrency: limit}); err != nil {
		t.Fatal(err)
	}
	ps := make([]queue.EnqueueParams, n)
	for i := range ps {
		p, err := queue.Params(Work{Mode: "ok"}, &queue.InsertOpts{Queue: q})
		if err != nil {
			t.Fatal(err)
		}
		ps[i] = p
	}
	if _, err := jobs.EnqueueMany(ctx, ps); err != nil {
		t.Fatal(err)
	}

	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[Work]) error { return nil })
	// The grant pass an hour away: every slot goes round through outcomes.
	wcfg := worker.Config{
		Queues: map[string]int{q: 8}, PromoteInterval: time.Hour, RetryPolicy: noWait{},
		Logger: slog.New(slog.DiscardHandler),
	}
	var byOutcomes, fetchClaims atomic.Int64
	wcfg.Hooks.Finish = func(_ context.Context, f worker.FinishInfo) { byOutcomes.Add(int64(f.Claimed)) }
	wcfg.Hooks.Claim = func(_ context.Context, c worker.ClaimInfo) {
		if !c.Finish {
			fetchClaims.Add(1)
		}
	}
	if err := telemetry.Worker(&wcfg, in.opts); err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(jobs, reg, wcfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitAllCompleted(t, db.Pool, n)
	stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}

	if byOutcomes.Load() == 0 {
		t.Fatal("outcomes claimed no job: the test exercises nothing")
	}
	rm := in.collect(t)
	_, claimed := queueHistogram[int64](t, rm, "jobfence.claim.jobs", q)
	if claimed != n {
		t.Errorf("jobfence.claim.jobs{queue=%s} sums to %d jobs, want all %d (%d of them claimed by outcomes)", q, claimed, n, byOutcomes.Load())
	}
	timed, _ := queueHistogram[float64](t, rm, "jobfence.claim.duration", q)
	if timed != uint64(fetchClaims.Load()) {
		t.Errorf("jobfence.claim.duration{queue=%s} has %d observations, want one per fetch loop claim (%d)", q, timed, fetchClaims.Load())
	}
	if got := count(t, rm, "jobfence.job.wait", "work"); got != n {
		t.Errorf("jobfence.job.wait has %d observations, want %d", got, n)
	}
	spans := 0
	for _, s := range in.spans.Ended() {
		if s.SpanKind() == trace.SpanKindConsumer {
			spans++
		}
	}
	if spans != n {
		t.Errorf("%d attempt spans, want %d", spans, n)
	}
}

// queueHistogram adds up the observations and the sum of histogram name's
// points whose queue attribute is q.
func queueHistogram[N int64 | float64](t *testing.T, rm metricdata.ResourceMetrics, name, q string) (count uint64, sum N) {
	t.Helper()
	for _, p := range find(t, rm, name).Data.(metricdata.Histogram[N]).DataPoints {
		if v, _ := p.Attributes.Value("queue"); v.AsString() == q {
			count, sum = count+p.Count, sum+p.Sum
		}
	}
	return count, sum
}
