package telemetry_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/logbuf"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/telemetry"
	"github.com/jobfence/jobfence/worker"
)

// Work is a job whose handler does what Mode says on its first attempt:
// "ok", "fail" (returns an error), "panic", or "stale" (the job is taken
// from under it, as a rescuer would after its lease ran out).
type Work struct {
	Mode string `json:"mode"`
}

func (Work) Kind() string { return "work" }

// TxWork is a job with a transactional handler.
type TxWork struct{}

func (TxWork) Kind() string { return "tx_work" }

// noWait retries at once, so the test does not wait out a backoff.
type noWait struct{}

func (noWait) NextRetry(*queue.Job) time.Time { return time.Now() }

// instruments are the SDK's in-memory readers.
type instruments struct {
	opts    telemetry.Options
	metrics *sdkmetric.ManualReader
	spans   *tracetest.SpanRecorder
}

func newInstruments(t *testing.T) instruments {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	return instruments{opts: telemetry.Options{MeterProvider: mp, TracerProvider: tp}, metrics: reader, spans: rec}
}

func (in instruments) collect(t *testing.T) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := in.metrics.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	return rm
}

// find returns the metric named name, or fails the test.
func find(t *testing.T, rm metricdata.ResourceMetrics, name string) metricdata.Metrics {
	t.Helper()
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m
			}
		}
	}
	t.Fatalf("no metric %s", name)
	return metricdata.Metrics{}
}

// sum adds up the points of counter name whose kind attribute is kind.
func sum(t *testing.T, rm metricdata.ResourceMetrics, name, kind string) int64 {
	t.Helper()
	return sumBy(t, rm, name, "kind", kind)
}

// sumBy adds up the points of counter name whose attribute key is value.
func sumBy(t *testing.T, rm metricdata.ResourceMetrics, name string, key attribute.Key, value string) int64 {
	t.Helper()
	var n int64
	for _, p := range find(t, rm, name).Data.(metricdata.Sum[int64]).DataPoints {
		if v, _ := p.Attributes.Value(key); v.AsString() == value {
			n += p.Value
		}
	}
	return n
}

// count adds up the observations of histogram name whose kind attribute
// is kind.
func count(t *testing.T, rm metricdata.ResourceMetrics, name, kind string) uint64 {
	t.Helper()
	var n uint64
	for _, p := range find(t, rm, name).Data.(metricdata.Histogram[float64]).DataPoints {
		if v, _ := p.Attributes.Value("kind"); v.AsString() == kind {
			n += p.Count
		}
	}
	return n
}

// TestWorker runs jobs that complete, fail once, panic once, are fenced
// out once, and commit in a transaction, and checks that the metrics count
// exactly that, that every attempt's span links to its enqueue's span, and
// that the panic, the stale outcome and the trace ids in logs are there.
func TestWorker(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	in := newInstruments(t)

	var pcfg pgqueue.Config
	if err := telemetry.PGQueue(&pcfg, in.opts); err != nil {
		t.Fatal(err)
	}
	jobs := pgqueue.New(db.Pool, pcfg)

	reg := worker.NewRegistry()
	var metaMu sync.Mutex
	var gotMeta map[string]string
	worker.Add(reg, func(ctx context.Context, job *worker.Job[Work]) error {
		if job.Attempt > 1 {
			return nil
		}
		switch job.Args.Mode {
		case "fail":
			return errors.New("first attempt fails")
		case "panic":
			panic("first attempt panics")
		case "stale":
			// What a rescuer does once the lease ran out: the job runs again
			// under a new fence, and this attempt's outcome is refused.
			_, err := db.Pool.Exec(ctx, `UPDATE jobfence_jobs SET fence = nextval('jobfence_fence_seq'), state = 'available', scheduled_at = now()
				WHERE id = $1 AND fence = $2`, job.ID, job.Fence)
			return err
		}
		return nil
	})
	worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[TxWork]) error {
		metaMu.Lock()
		gotMeta = job.Metadata
		metaMu.Unlock()
		_, err := tx.Exec(ctx, `SELECT 1`)
		return err
	})

	// Only the worker's tests see these logs: they prove the job's fields
	// and the trace id are on its lines.
	logs := &logbuf.Buffer{}
	wcfg := worker.Config{
		Queues: map[string]int{"default": 4}, RetryPolicy: noWait{}, PollInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(logs, nil)),
	}
	if err := telemetry.Worker(&wcfg, in.opts); err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(jobs, reg, wcfg)
	if err != nil {
		t.Fatal(err)
	}

	modes := map[string]int{"ok": 5, "fail": 2, "panic": 1, "stale": 1}
	var ps []queue.EnqueueParams
	for mode, n := range modes {
		for range n {
			p, err := queue.Params(Work{Mode: mode}, nil)
			if err != nil {
				t.Fatal(err)
			}
			ps = append(ps, p)
		}
	}
	if _, err := jobs.EnqueueMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := jobs.Insert(ctx, TxWork{}, &queue.InsertOpts{Metadata: map[string]string{"tenant": "t1"}}); err != nil {
			t.Fatal(err)
		}
	}

	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitAllCompleted(t, db.Pool, 11)
	stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}

	rm := in.collect(t)
	for _, c := range []struct {
		name, kind string
		want       int64
	}{
		{"jobfence.jobs.completed", "work", 9},
		{"jobfence.jobs.completed", "tx_work", 2},
		{"jobfence.jobs.retried", "work", 3},
		{"jobfence.jobs.stale", "work", 1},
	} {
		if got := sum(t, rm, c.name, c.kind); got != c.want {
			t.Errorf("%s{kind=%s} = %d, want %d", c.name, c.kind, got, c.want)
		}
	}
	// 9 jobs, three of which ran twice after a failure or a panic, and
	// one twice after a stale outcome.
	for _, name := range []string{"jobfence.job.duration", "jobfence.job.wait"} {
		if got := count(t, rm, name, "work"); got != 13 {
			t.Errorf("%s{kind=work} has %d observations, want 13", name, got)
		}
		if got := count(t, rm, name, "tx_work"); got != 2 {
			t.Errorf("%s{kind=tx_work} has %d observations, want 2", name, got)
		}
	}
	metaMu.Lock()
	if gotMeta["tenant"] != "t1" || gotMeta["traceparent"] == "" {
		t.Errorf("a transactional job's metadata = %v, want its own tenant and the enqueue's traceparent", gotMeta)
	}
	metaMu.Unlock()

	checkSpans(t, in.spans.Ended())
	checkLogs(t, strings.Split(strings.TrimSpace(logs.String()), "\n"))
}

// waitAllCompleted waits until the database holds want jobs, every one
// completed. It counts through pgqueue.Client.Counts, which reads the
// finished-jobs table too: a worker makes its partitions as it starts, and
// a job completed after that leaves jobfence_jobs.
func waitAllCompleted(t *testing.T, pool *pgxpool.Pool, want int) {
	t.Helper()
	// A plain client, not the test's instrumented one: its reads make no
	// spans for the tests to count.
	c := pgqueue.New(pool, pgqueue.Config{})
	deadline := time.Now().Add(2 * time.Minute)
	for {
		counts, err := c.Counts(context.Background(), "")
		if err != nil {
			t.Fatal(err)
		}
		var all int64
		for _, n := range counts {
			all += n
		}
		done := counts[queue.StateCompleted]
		if done == int64(want) && all == int64(want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d jobs completed, want %d", done, all, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func checkSpans(t *testing.T, spans []sdktrace.ReadOnlySpan) {
	t.Helper()
	producers := map[trace.SpanID]bool{}
	var consumers []sdktrace.ReadOnlySpan
	for _, s := range spans {
		switch s.SpanKind() {
		case trace.SpanKindProducer:
			producers[s.SpanContext().SpanID()] = true
		case trace.SpanKindConsumer:
			consumers = append(consumers, s)
		}
	}
	if len(producers) != 3 {
		t.Errorf("%d producer spans, want 3 (one EnqueueMany, two Inserts)", len(producers))
	}
	if len(consumers) != 15 {
		t.Errorf("%d consumer spans, want 15 (one per attempt)", len(consumers))
	}
	var panics, stale int
	for _, s := range consumers {
		if s.Name() != "process default" {
			t.Errorf("consumer span named %q", s.Name())
		}
		attrs := attribute.NewSet(s.Attributes()...)
		for _, k := range []attribute.Key{"messaging.system", "messaging.destination.name", "messaging.operation.type", "jobfence.job.id", "jobfence.job.kind", "jobfence.job.attempt", "jobfence.job.fence"} {
			if _, ok := attrs.Value(k); !ok {
				t.Errorf("span %s has no %s", s.Name(), k)
			}
		}
		linked := false
		for _, l := range s.Links() {
			linked = linked || producers[l.SpanContext.SpanID()]
		}
		if !linked {
			t.Errorf("attempt span of job %v links to no enqueue span (links %v)", attrs, s.Links())
		}
		if v, _ := attrs.Value("jobfence.job.stale"); v.AsBool() {
			stale++
			if !hasEvent(s, "jobfence.job.stale") || s.Status().Code != codes.Error {
				t.Errorf("stale span lacks its event or error status: %v", s.Status())
			}
		}
		for _, e := range s.Events() {
			if e.Name != "exception" {
				continue
			}
			es := attribute.NewSet(e.Attributes...)
			if v, _ := es.Value("exception.message"); strings.Contains(v.AsString(), "first attempt panics") {
				panics++
				if st, _ := es.Value("exception.stacktrace"); !strings.Contains(st.AsString(), "panic") || s.Status().Code != codes.Error {
					t.Errorf("panic span: stack %q, status %v", st.AsString(), s.Status())
				}
			}
		}
	}
	if panics != 1 || stale != 1 {
		t.Errorf("%d panic spans and %d stale spans, want 1 and 1", panics, stale)
	}
}

func hasEvent(s sdktrace.ReadOnlySpan, name string) bool {
	for _, e := range s.Events() {
		if e.Name == name {
			return true
		}
	}
	return false
}

// checkLogs finds the stale outcome's line and checks it names the job and
// its trace.
func checkLogs(t *testing.T, lines []string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(l, "stale fence") {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"job", "kind", "queue", "attempt", "fence", "trace_id", "span_id"} {
			if _, ok := rec[k]; !ok {
				t.Errorf("log line about a stale job has no %q: %s", k, l)
			}
		}
		return
	}
	t.Errorf("no log line about the stale outcome in %d lines", len(lines))
}
