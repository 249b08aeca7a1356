package dashboard_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/dashboard"
	"github.com/jobfence/jobfence/internal/pgtest"
)

// loadJobsSQL fills jobfence_jobs with 1M jobs over 5 queues and 4 kinds.
// $1 picks the mix, per thousand jobs:
//
//	typical: 930 completed over the last 24 hours (a day's retention), 30
//	  available, 20 scheduled, 5 retryable, 2 running, 10 discarded, 3
//	  cancelled
//	backlog: 1M available, all due: a queue that fell far behind
//	recent: 1M completed within the last hour
const loadJobsSQL = `
INSERT INTO jobfence_jobs (queue, kind, args, state, scheduled_at, attempt, fence, lease_expires_at, errors, created_at, attempted_at, finalized_at)
SELECT (ARRAY['default', 'billing', 'email', 'reports', 'webhooks'])[1 + i % 5],
       (ARRAY['invoice', 'welcome', 'report', 'hook'])[1 + i % 4],
       jsonb_build_object('user_id', i, 'note', 'an argument of a typical size for a job'),
       s.state,
       CASE WHEN s.state IN ('scheduled', 'retryable') THEN now() + (i % 3600) * interval '1 second'
            WHEN s.state = 'available' THEN now() - (i % 600) * interval '1 second'
            ELSE now() - interval '1 day' END,
       CASE WHEN s.state = 'available' THEN 0 ELSE 1 END,
       i,
       CASE WHEN s.state = 'running' THEN now() + interval '30 seconds' END,
       CASE WHEN s.state IN ('retryable', 'discarded') THEN '[{"attempt":1,"at":"2026-01-01T00:00:00Z","error":"boom"}]'::jsonb ELSE '[]' END,
       now() - interval '1 day',
       CASE WHEN s.state <> 'available' THEN now() - interval '1 day' END,
       CASE WHEN s.state IN ('completed', 'discarded', 'cancelled') THEN
           now() - (i % CASE WHEN $1 = 'recent' THEN 3600 ELSE 86400 END) * interval '1 second' END
FROM generate_series(1, 1000000) i,
LATERAL (SELECT CASE
    WHEN $1 = 'backlog' THEN 'available'
    WHEN $1 = 'recent' THEN 'completed'
    WHEN i % 1000 < 930 THEN 'completed'
    WHEN i % 1000 < 960 THEN 'available'
    WHEN i % 1000 < 980 THEN 'scheduled'
    WHEN i % 1000 < 985 THEN 'retryable'
    WHEN i % 1000 < 987 THEN 'running'
    WHEN i % 1000 < 997 THEN 'discarded'
    ELSE 'cancelled' END AS state) s`

// BenchmarkOverview renders the overview and the queues page (bounded
// counts, pgqueue.Client.Queues) and /metrics (exact counts) with 1M jobs
// in the table, in three mixes (see loadJobsSQL), with the claim index of
// migrations 1 to 5 and with migration 6's per-state indexes. Run it with
//
//	go test -run '^$' -bench BenchmarkOverview -benchtime 20x ./dashboard
//
// The target is under 200 ms per render of either page in every mix.
func BenchmarkOverview(b *testing.B) {
	db := pgtest.New(b)
	ctx := context.Background()
	h := dashboard.New(db.Pool, dashboard.Options{})
	for _, mix := range []string{"typical", "backlog", "recent"} {
		start := time.Now()
		if _, err := db.Pool.Exec(ctx, "TRUNCATE jobfence_jobs"); err != nil {
			b.Fatal(err)
		}
		if _, err := db.Pool.Exec(ctx, loadJobsSQL, mix); err != nil {
			b.Fatal(err)
		}
		// As autovacuum would have by the time anyone looks.
		if _, err := db.Pool.Exec(ctx, "VACUUM ANALYZE jobfence_jobs"); err != nil {
			b.Fatal(err)
		}
		b.Logf("%s: 1M jobs loaded in %s", mix, time.Since(start).Round(time.Millisecond))
		// Before and after migration 6, which replaced the claim index.
		for _, indexes := range []string{pgtest.ClaimIndex, pgtest.PerStateIndexes} {
			pgtest.UseClaimIndexes(b, db, indexes)
			for _, path := range []string{"/", "/queues", "/metrics"} {
				b.Run(mix+"/"+strings.ReplaceAll(indexes, " ", "_")+path, func(b *testing.B) {
					pgtest.Loop(b, func() {
						rec := httptest.NewRecorder()
						h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
						if rec.Code != http.StatusOK {
							b.Fatalf("GET %s = %d: %s", path, rec.Code, rec.Body)
						}
					})
				})
			}
		}
	}
}
