package scheduler

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
)

// TestUnfinishedUsesUnfinishedKeyIndex shows that the look-up of an
// unfinished earlier run reads only the schedule's unfinished keys, searching
// the partial index of unfinished keys for them, rather than reading every
// job, every retained fire, or the whole index.
func TestUnfinishedUsesUnfinishedKeyIndex(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// The table is empty: without this, a sequential scan is always cheapest.
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, `EXPLAIN `+unfinishedSQL, keyPrefix("report"), time.Now().Unix())
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	out := strings.Join(plan, "\n")
	// The index must be searched for the prefix, not read whole.
	if !strings.Contains(out, "Index Scan using jobfence_jobs_unfinished_key") ||
		!strings.Contains(out, "Index Cond: ((unique_key >= 'cron:report:'::text) AND (unique_key < 'cron:report:A'::text))") {
		t.Fatalf("the plan does not search the index of unfinished keys for the schedule's keys:\n%s", out)
	}
}
