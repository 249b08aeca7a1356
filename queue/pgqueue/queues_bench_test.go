package pgqueue_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// BenchmarkQueues1M measures Queues over a million jobs in 8 queues, most
// of them completed as in a busy service's table, with one queue paused:
// the read behind `jobfence queues list` and the dashboard's overview and
// queues pages. A job's queue and state share i's parity, so four queues
// have 25,000 available and 25,000 retryable jobs and four 25,000
// scheduled and 25,000 discarded: every count is over the cap, the most
// any count costs.
func BenchmarkQueues1M(b *testing.B) {
	db := pgtest.New(b)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `
INSERT INTO jobfence_jobs (queue, kind, state, scheduled_at, finalized_at)
SELECT 'q' || (i % 8), 'k',
       (ARRAY['completed','completed','completed','completed','completed','completed','available','scheduled','retryable','discarded'])[1 + i % 10],
       now() - (i % 1000) * interval '1 second',
       CASE WHEN i % 10 < 6 OR i % 10 = 9 THEN now() END
FROM generate_series(1, 1000000) AS i`); err != nil {
		b.Fatal(err)
	}
	// As autovacuum would have by the time anyone looks: an index-only
	// count of jobs on pages not yet vacuumed visits them (see docs/dashboard.md).
	if _, err := db.Pool.Exec(ctx, `VACUUM ANALYZE jobfence_jobs`); err != nil {
		b.Fatal(err)
	}
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: slog.New(slog.DiscardHandler)})
	if err := c.PauseQueue(ctx, "q3", "bench"); err != nil {
		b.Fatal(err)
	}
	// Before and after migration 6, which replaced the claim index.
	for _, indexes := range []string{pgtest.ClaimIndex, pgtest.PerStateIndexes} {
		pgtest.UseClaimIndexes(b, db, indexes)
		b.Run(strings.ReplaceAll(indexes, " ", "_"), func(b *testing.B) {
			pgtest.Loop(b, func() {
				qs, err := c.Queues(ctx)
				if err != nil || len(qs) != 8 {
					b.Fatalf("Queues = %d queues, %v", len(qs), err)
				}
			})
		})
	}
}
