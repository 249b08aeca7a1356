package pgqueue_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// BenchmarkSearchAmongMillion finds one job by an args field among
// 1,000,000 (a needle buried under 700,000 newer jobs), as an operator's
// search pages through them: calls of the default ScanLimit (100,000),
// each going on below where the last stopped, until the page holds the
// job; then the same search narrowed to an ID range of 10,000 around it.
// It reports the calls the paging took, the milliseconds per call and
// those of the narrowed search. Figures: docs/benchmarks/dashboard.md.
// Run it as
//
//	flock -x /tmp/jobfence-bench.lock go test -run '^$' -bench SearchAmongMillion -benchtime 1x ./queue/pgqueue
func BenchmarkSearchAmongMillion(b *testing.B) {
	ctx := context.Background()
	db := pgtest.New(b)
	c := pgqueue.New(db.Pool, pgqueue.Config{})
	const total, newer, chunk = 1_000_000, 700_000, 50_000
	insert := func(n, from int) {
		for done := 0; done < n; done += chunk {
			ps := make([]queue.EnqueueParams, 0, chunk)
			for i := done; i < min(n, done+chunk); i++ {
				ps = append(ps, queue.EnqueueParams{Kind: "bill", Queue: "search", Args: fmt.Appendf(nil, `{"customer":"c%d","n":%d}`, (from+i)%5000, from+i)})
			}
			if _, err := c.EnqueueMany(ctx, ps); err != nil {
				b.Fatal(err)
			}
		}
	}
	insert(total-newer-1, 0)
	needle, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "bill", Queue: "search", Args: []byte(`{"customer":"needle","order":{"id":7}}`)})
	if err != nil {
		b.Fatal(err)
	}
	insert(newer, total-newer)
	if _, err := db.Pool.Exec(ctx, `VACUUM ANALYZE jobfence_jobs`); err != nil {
		b.Fatal(err)
	}
	args := []byte(`{"order":{"id":7}}`)
	b.ResetTimer()
	for range b.N {
		var before int64
		calls := 0
		start := time.Now()
		for {
			calls++
			jobs, err := c.List(ctx, pgqueue.ListParams{Args: args, Before: before})
			if len(jobs) == 1 && jobs[0].ID == needle.ID {
				break
			}
			var sl *pgqueue.ScanLimitError
			if !errors.As(err, &sl) || calls > 20 {
				b.Fatalf("call %d: %d jobs, %v; want the needle or ErrSearchTooWide", calls, len(jobs), err)
			}
			before = sl.Next
		}
		paged := time.Since(start)
		start = time.Now()
		jobs, err := c.List(ctx, pgqueue.ListParams{Args: args, MinID: needle.ID - 5_000, MaxID: needle.ID + 5_000})
		narrowed := time.Since(start)
		if err != nil || len(jobs) != 1 || jobs[0].ID != needle.ID {
			b.Fatalf("narrowed: %d jobs, %v", len(jobs), err)
		}
		b.ReportMetric(float64(calls), "calls")
		b.ReportMetric(float64(paged.Milliseconds())/float64(calls), "ms/call")
		b.ReportMetric(float64(narrowed.Microseconds())/1000, "ms-narrowed")
	}
}
