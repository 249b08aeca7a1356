package jobfence_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/jobfence/jobfence"
	"github.com/jobfence/jobfence/worker"
)

// The kinds of BenchmarkBatchHandler: the same no-op job, run by a plain
// handler or by a batch handler.
type (
	benchOne  struct{}
	benchMany struct{}
)

func (benchOne) Kind() string  { return "bench_one" }
func (benchMany) Kind() string { return "bench_many" }

// BenchmarkBatchHandler measures b.N no-op jobs through a batch handler
// of 100 (AddBatchHandler, MaxSize 100, Linger 100ms) against a plain
// handler (AddHandler), on a throwaway durable PostgreSQL with
// pg_stat_statements: one client, 100 at once on the queue, the jobs
// inserted beforehand with InsertMany, timed from Start to the last
// completion; the variants alternate, A B A B A B. It reports jobs/s,
// the handler's calls per job, the round trips the client's pool sent
// per job, the server's execution time per job, the Finish statements'
// jobs per statement (Hooks.Finish) and the machine's load. Figures:
// docs/benchmarks/batch.md. Run it as
//
//	flock -x /tmp/jobfence-bench.lock go test -run '^$' -bench BatchHandler -benchtime 20000x .
func BenchmarkBatchHandler(b *testing.B) {
	ctx := context.Background()
	var rt roundTrips
	pool, stats, statements := benchServer(ctx, b, &rt)

	var calls, finishes, finished atomic.Int64
	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[benchOne]) error {
		calls.Add(1)
		return nil
	})
	jobfence.AddBatchHandler(reg, func(ctx context.Context, jobs []*jobfence.Job[benchMany]) []error {
		calls.Add(1)
		return make([]error, len(jobs))
	}, jobfence.BatchOpts{MaxSize: 100})
	hooks := worker.Hooks{Finish: func(_ context.Context, f worker.FinishInfo) {
		finishes.Add(1)
		finished.Add(int64(f.Jobs))
	}}

	variants := []struct {
		name string
		args jobfence.Args
	}{
		{"plain", benchOne{}},
		{"batch100", benchMany{}},
	}
	for round := 1; round <= 3; round++ {
		for _, v := range variants {
			b.Run(fmt.Sprintf("round=%d/%s", round, v.name), func(b *testing.B) {
				client, err := jobfence.NewClient(pool, jobfence.Config{Queues: map[string]int{"bench": 100}, Handlers: reg,
					Worker: worker.Config{Hooks: hooks}, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				ps := make([]jobfence.InsertManyParams, b.N)
				for i := range ps {
					ps[i] = jobfence.InsertManyParams{Args: v.args, InsertOpts: &jobfence.InsertOpts{Queue: "bench"}}
				}
				if _, err := client.InsertMany(ctx, ps); err != nil {
					b.Fatal(err)
				}
				load := loadavg()
				all0, _, wal0 := serverTime(ctx, b, stats, statements)
				calls.Store(0)
				finishes.Store(0)
				finished.Store(0)
				rt.total.Store(0)
				runTimed(ctx, b, client, &rt, int64(b.N))
				all1, _, wal1 := serverTime(ctx, b, stats, statements)
				n := float64(b.N)
				b.ReportMetric(n/b.Elapsed().Seconds(), "jobs/s")
				b.ReportMetric(float64(calls.Load())/n, "calls/job")
				b.ReportMetric(float64(rt.total.Load())/n, "rt/job")
				if statements {
					b.ReportMetric((all1-all0)*1000/n, "server-µs/job")
				}
				b.ReportMetric(float64(wal1-wal0)/n, "WAL-B/job")
				b.ReportMetric(float64(finished.Load())/float64(max(finishes.Load(), 1)), "jobs/finish")
				b.ReportMetric((load+loadavg())/2, "load1")
			})
		}
	}
}
