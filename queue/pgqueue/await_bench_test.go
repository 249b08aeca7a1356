package pgqueue_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// BenchmarkCompleteUnawaited times the completion of 1,000 jobs nobody
// awaits (one Finish, completeSQL, in place and moved to the finished
// table), with migration 00028's triggers and with them disabled, which
// is what the completion cost before it: the figures are in
// docs/benchmarks/await.md. Run it with -count to alternate the two.
func BenchmarkCompleteUnawaited(b *testing.B) {
	db := pgtest.New(b)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{})
	const batch = 1000
	for _, moved := range []bool{false, true} {
		if moved {
			if _, err := c.MaintainFinished(ctx, time.Hour); err != nil {
				b.Fatal(err)
			}
		}
		for _, triggers := range []bool{true, false} {
			name := map[bool]string{false: "in place", true: "moved"}[moved] + "/" + map[bool]string{false: "no triggers", true: "triggers"}[triggers]
			b.Run(name, func(b *testing.B) {
				verb := map[bool]string{false: "DISABLE", true: "ENABLE"}[triggers]
				for _, tg := range []string{"jobfence_jobs_awaited_ended", "jobfence_jobs_awaited_gone"} {
					if _, err := db.Pool.Exec(ctx, "ALTER TABLE jobfence_jobs "+verb+" TRIGGER "+tg); err != nil {
						b.Fatal(err)
					}
				}
				ps := make([]queue.EnqueueParams, batch)
				for i := range ps {
					ps[i] = queue.EnqueueParams{Kind: "k", Queue: "bench"}
				}
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					if _, err := c.EnqueueMany(ctx, ps); err != nil {
						b.Fatal(err)
					}
					jobs, err := c.Claim(ctx, queue.ClaimParams{Queue: "bench", Limit: batch, Lease: time.Minute, WorkerID: "bench"})
					if err != nil || len(jobs) != batch {
						b.Fatalf("claimed %d, %v", len(jobs), err)
					}
					fs := make([]queue.Finish, len(jobs))
					for i, j := range jobs {
						fs[i] = queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeComplete}
					}
					b.StartTimer()
					if stale, err := c.Finish(ctx, fs); err != nil || len(stale) != 0 {
						b.Fatalf("finish: %d stale, %v", len(stale), err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(b.N*batch), "µs/job")
			})
		}
	}
}
