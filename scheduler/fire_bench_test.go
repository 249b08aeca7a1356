package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// BenchmarkFire measures one fire handled by a fleet: every instance (each
// with its own pool) enqueues the same fire at once and one insert wins. An
// iteration is one fire; fires/s is the fleet's rate for one schedule.
func BenchmarkFire(b *testing.B) {
	for _, instances := range []int{1, 20} {
		b.Run(fmt.Sprintf("instances=%d", instances), func(b *testing.B) {
			db := pgtest.New(b)
			quiet := slog.New(slog.DiscardHandler)
			var fleet []*Scheduler
			for range instances {
				s := New(pgqueue.New(db.NewPool(b, 2), pgqueue.Config{Logger: quiet}), Config{Logger: quiet})
				if err := s.Add("bench", "* * * * * *", "bench", nil, Options{}); err != nil {
					b.Fatal(err)
				}
				fleet = append(fleet, s)
			}
			ctx := context.Background()
			base := time.Now().Truncate(time.Second)
			b.ResetTimer()
			for i := range b.N {
				fire := []time.Time{base.Add(time.Duration(i) * time.Second)}
				var wg sync.WaitGroup
				for _, s := range fleet {
					wg.Go(func() {
						if err := s.enqueue(ctx, s.schedules[0], fire); err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "fires/s")
			b.StopTimer()
			var jobs int
			if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM jobfence_jobs").Scan(&jobs); err != nil {
				b.Fatal(err)
			}
			if jobs != b.N {
				b.Fatalf("%d jobs for %d fires", jobs, b.N)
			}
		})
	}
}
