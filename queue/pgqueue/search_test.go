package pgqueue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestSearchFindsOneAmongMany: among 30,000 jobs (some completed into the
// finished table), a search by an args field finds the one job that has
// it, when the search reads every job (a ScanLimit above the count) and
// when an ID range narrows it; with the default bound it finds the job
// if it is among the newest jobs read, and a bound that cannot reach it
// returns a ScanLimitError whose Next the next call goes on from, down to
// the job.
func TestSearchFindsOneAmongMany(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	if _, err := c.MaintainFinished(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	const n = 30_000
	ps := make([]queue.EnqueueParams, 0, n)
	for i := range n {
		ps = append(ps, queue.EnqueueParams{Kind: "bill", Queue: "search", Args: fmt.Appendf(nil, `{"customer":"c%d","n":%d}`, i%500, i)})
	}
	if _, err := c.EnqueueMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	// Complete a few, so that the search reads the finished table too.
	done := claim(t, c, "search", 100, time.Minute)
	complete(t, c, done...)
	needle, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "bill", Queue: "search", Args: []byte(`{"customer":"needle","order":{"id":7}}`)})
	if err != nil {
		t.Fatal(err)
	}
	// Bury it under 20,000 newer jobs.
	if _, err := c.EnqueueMany(ctx, ps[:20_000]); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `ANALYZE jobfence_jobs`); err != nil {
		t.Fatal(err)
	}
	find := func(p pgqueue.ListParams) ([]*queue.Job, error) {
		t.Helper()
		p.Args = []byte(`{"order":{"id":7}}`)
		return c.List(ctx, p)
	}
	jobs, err := find(pgqueue.ListParams{ScanLimit: 60_000})
	if err != nil || len(jobs) != 1 || jobs[0].ID != needle.ID {
		t.Fatalf("search reading every job: %d jobs, %v; want job %d", len(jobs), err, needle.ID)
	}
	jobs, err = find(pgqueue.ListParams{MinID: needle.ID - 10, MaxID: needle.ID + 10, ScanLimit: 100})
	if err != nil || len(jobs) != 1 || jobs[0].ID != needle.ID {
		t.Fatalf("search in an ID range: %d jobs, %v; want job %d", len(jobs), err, needle.ID)
	}
	// A bound of 5,000 reads the newest 5,000 jobs, then 5,000 more from
	// where the last call stopped: the fifth call reaches the job, which
	// comes back with the error (the page is not full: more may be below).
	var before int64
	for call := 1; call <= 5; call++ {
		jobs, err = find(pgqueue.ListParams{ScanLimit: 5_000, Before: before})
		var sl *pgqueue.ScanLimitError
		if !errors.Is(err, pgqueue.ErrSearchTooWide) || !errors.As(err, &sl) || sl.Scanned != 5_000 ||
			!strings.Contains(err.Error(), "narrow it") {
			t.Fatalf("call %d: %d jobs, %v; want ErrSearchTooWide", call, len(jobs), err)
		}
		if before != 0 && sl.Next >= before {
			t.Fatalf("call %d went on from %d, not below %d", call, sl.Next, before)
		}
		before = sl.Next
		found := len(jobs) == 1 && jobs[0].ID == needle.ID
		if found != (call == 5) || len(jobs) > 1 {
			t.Fatalf("call %d: %d jobs; want job %d at the fifth call only", call, len(jobs), needle.ID)
		}
	}
	// The plan is bounded: however many jobs the tables hold, the search
	// reads ScanLimit rows of them at most (an index scan in ID order
	// under the LIMIT, no sort of the whole table), and one row ahead of
	// each table or partition that the merge in ID order reads.
	for _, p := range []pgqueue.ListParams{{ScanLimit: 1_000}, {ScanLimit: 1_000, Tag: "x", Queue: "search"}, {ScanLimit: 1_000, After: 5}} {
		p.Args = []byte(`{"customer":"nobody"}`)
		read := rowsRead(t, db.Pool, p)
		if read > 1_020 {
			t.Errorf("%+v: read %d rows, want at most the 1,000 of ScanLimit (and one per partition)", p, read)
		}
	}
	// Nothing to find: the whole table read, no error, no job.
	if jobs, err := c.List(ctx, pgqueue.ListParams{Args: []byte(`{"customer":"nobody"}`), ScanLimit: 60_000}); err != nil || len(jobs) != 0 {
		t.Fatalf("search for nothing: %d jobs, %v", len(jobs), err)
	}
}

// rowsRead is how many rows p's List statement read from the tables, as
// EXPLAIN ANALYZE counts them (the scans' rows and those their filters
// removed).
func rowsRead(t *testing.T, pool *pgxpool.Pool, p pgqueue.ListParams) int {
	t.Helper()
	q, args := pgqueue.ListQuery(p)
	var plan []map[string]any
	if err := pool.QueryRow(context.Background(), `EXPLAIN (ANALYZE, FORMAT JSON) `+q, args...).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	n := 0
	var walk func(node map[string]any)
	walk = func(node map[string]any) {
		if _, ok := node["Relation Name"]; ok {
			for _, k := range []string{"Actual Rows", "Rows Removed by Filter", "Rows Removed by Index Recheck"} {
				if v, ok := node[k].(float64); ok {
					n += int(v)
				}
			}
		}
		if kids, ok := node["Plans"].([]any); ok {
			for _, k := range kids {
				walk(k.(map[string]any))
			}
		}
	}
	walk(plan[0]["Plan"].(map[string]any))
	return n
}

// TestSearchFilters: each filter of ListParams finds what it names, in
// the jobs table and the finished one, pages with the cursor, and
// parameters that contradict each other or do not parse are refused
// with ErrBadListParams.
func TestSearchFilters(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	if _, err := c.MaintainFinished(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for i := range 6 {
		p := queue.EnqueueParams{Kind: "k", Queue: "f", Args: fmt.Appendf(nil, `{"customer":"c%d","region":"eu"}`, i%2)}
		if i%3 == 0 {
			p.Tags = []string{"vip"}
		}
		if i == 4 {
			p.Metadata = map[string]string{"tenant": "t9"}
		}
		res, err := c.Enqueue(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ID)
	}
	// Job 0 (tagged vip) completes into the finished table.
	j := claim(t, c, "f", 1, time.Minute)[0]
	complete(t, c, j)
	if got := where(t, db.Pool, j.ID); got != "finished" || j.ID != ids[0] {
		t.Fatalf("job %d in %q, want job %d finished", j.ID, got, ids[0])
	}
	full, err := c.Get(ctx, ids[5])
	if err != nil {
		t.Fatal(err)
	}
	idsOf := func(p pgqueue.ListParams) string {
		t.Helper()
		jobs, err := c.List(ctx, p)
		if err != nil {
			t.Fatalf("%+v: %v", p, err)
		}
		var out []string
		for _, j := range jobs {
			for k, id := range ids {
				if id == j.ID {
					out = append(out, fmt.Sprint(k))
				}
			}
		}
		return strings.Join(out, ",")
	}
	for _, tt := range []struct {
		name string
		p    pgqueue.ListParams
		want string
	}{
		{"tag, live and finished", pgqueue.ListParams{Tag: "vip"}, "3,0"},
		{"tag, completed", pgqueue.ListParams{Tag: "vip", State: queue.StateCompleted}, "0"},
		{"args", pgqueue.ListParams{Args: []byte(`{"customer":"c1"}`)}, "5,3,1"},
		{"args and tag", pgqueue.ListParams{Args: []byte(` {"customer":"c0"} `), Tag: "vip"}, "0"},
		{"metadata", pgqueue.ListParams{Metadata: map[string]string{"tenant": "t9"}}, "4"},
		{"idempotency key", pgqueue.ListParams{IdempotencyKey: full.IdempotencyKey()}, "5"},
		{"bare key", pgqueue.ListParams{IdempotencyKey: strings.TrimPrefix(full.Key, "jobfence-")}, "5"},
		{"ID range", pgqueue.ListParams{MinID: ids[1], MaxID: ids[3]}, "3,2,1"},
		{"created after", pgqueue.ListParams{CreatedAfter: time.Now().Add(-time.Hour)}, "5,4,3,2,1,0"},
		{"created before", pgqueue.ListParams{CreatedBefore: time.Now().Add(-time.Hour)}, ""},
		{"page 1", pgqueue.ListParams{Args: []byte(`{"region":"eu"}`), Limit: 4}, "5,4,3,2"},
		{"page 2", pgqueue.ListParams{Args: []byte(`{"region":"eu"}`), Limit: 4, Before: ids[2]}, "1,0"},
		{"page up", pgqueue.ListParams{Args: []byte(`{"region":"eu"}`), Limit: 2, After: ids[1]}, "3,2"},
	} {
		if got := idsOf(tt.p); got != tt.want {
			t.Errorf("%s: jobs %q, want %q", tt.name, got, tt.want)
		}
	}
	for _, tt := range []struct {
		p    pgqueue.ListParams
		want string
	}{
		{pgqueue.ListParams{Args: []byte(`["c1"]`)}, `Args "[\"c1\"]" is not a JSON object`},
		{pgqueue.ListParams{Args: []byte(`{"a":`)}, "is not a JSON object"},
		{pgqueue.ListParams{IdempotencyKey: "jobfence-job-7"}, `IdempotencyKey "jobfence-job-7" is not a job's key`},
		{pgqueue.ListParams{MinID: 9, MaxID: 3}, "MinID 9 is above MaxID 3"},
		{pgqueue.ListParams{CreatedAfter: time.Unix(100, 0), CreatedBefore: time.Unix(50, 0)}, "is not before CreatedBefore"},
		{pgqueue.ListParams{ScanLimit: -1}, "ScanLimit -1 is negative"},
	} {
		_, err := c.List(ctx, tt.p)
		if !errors.Is(err, pgqueue.ErrBadListParams) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want ErrBadListParams with %q", tt.p, err, tt.want)
		}
	}
}
