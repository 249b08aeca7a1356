package jobfence_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/jobfence/jobfence"
)

// The two kinds of BenchmarkAttemptLogs: a job whose handler logs three
// lines through jobfence.Logger, and one that logs nothing.
type (
	benchLogs   struct{}
	benchSilent struct{}
)

func (benchLogs) Kind() string   { return "bench_logs" }
func (benchSilent) Kind() string { return "bench_silent" }

// BenchmarkAttemptLogs measures what per-attempt logs cost: a no-op job
// that logs three lines (Info, with an attribute each) through
// jobfence.Logger, stored with its attempt, against one that logs
// nothing, on a throwaway durable PostgreSQL (fsync on) with
// pg_stat_statements; the client's own logger discards. Each
// sub-benchmark runs b.N jobs inserted beforehand with InsertMany, worked
// by one client (8 at once), timed from Start to the last completion; the
// variants alternate (silent, logs, silent, logs ...). It reports jobs/s,
// the round trips per job and those naming jobfence_attempt_logs, the
// server's execution time per job and that of the logs' statement, WAL
// bytes per job and the machine's load. Figures:
// docs/benchmarks/durable.md. Run it as
//
//	flock -x /tmp/jobfence-bench.lock go test -run '^$' -bench AttemptLogs -benchtime 2000x .
func BenchmarkAttemptLogs(b *testing.B) {
	ctx := context.Background()
	rt := roundTrips{table: "jobfence_attempt_logs"}
	pool, stats, statements := benchServer(ctx, b, &rt)

	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[benchLogs]) error {
		log := jobfence.Logger(ctx)
		log.Info("fetching", "url", "https://example.com/a")
		log.Info("fetched", "bytes", 1234)
		log.Info("stored", "rows", 12)
		return nil
	})
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[benchSilent]) error { return nil })

	variants := []struct {
		name string
		args jobfence.Args
	}{{"silent", benchSilent{}}, {"logs3", benchLogs{}}}
	for round := 1; round <= 3; round++ {
		for _, v := range variants {
			b.Run(fmt.Sprintf("round=%d/%s", round, v.name), func(b *testing.B) {
				client, err := jobfence.NewClient(pool, jobfence.Config{Queues: map[string]int{"bench": 8}, Handlers: reg,
					Logger: slog.New(slog.DiscardHandler)})
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
				all0, logs0, wal0 := serverTimeOf(ctx, b, stats, statements, "jobfence_attempt_logs")
				rt.total.Store(0)
				rt.steps.Store(0)
				runTimed(ctx, b, client, &rt, int64(b.N))
				all1, logs1, wal1 := serverTimeOf(ctx, b, stats, statements, "jobfence_attempt_logs")
				n := float64(b.N)
				b.ReportMetric(n/b.Elapsed().Seconds(), "jobs/s")
				b.ReportMetric(float64(rt.total.Load())/n, "rt/job")
				b.ReportMetric(float64(rt.steps.Load())/n, "logs-rt/job")
				if statements {
					b.ReportMetric((all1-all0)*1000/n, "server-µs/job")
					b.ReportMetric((logs1-logs0)*1000/n, "logs-server-µs/job")
				}
				b.ReportMetric(float64(wal1-wal0)/n, "WAL-B/job")
				b.ReportMetric((load+loadavg())/2, "load1")
			})
		}
	}
}
