package pgqueue_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestPriorityAging: with Config.PriorityAging, a job of priority 4 that
// has waited 3 intervals is aged to priority 1 by the promoter's passes,
// one level an interval, and is claimed before a priority-1 job inserted
// after it; a job that has waited less than an interval, and one at the
// first priority, keep theirs; without PriorityAging nothing changes.
func TestPriorityAging(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	const every = time.Second
	aging := pgqueue.New(db.Pool, pgqueue.Config{PriorityAging: every})
	plain := pgqueue.New(db.Pool, pgqueue.Config{})
	old, err := aging.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: "q", Priority: 4})
	if err != nil {
		t.Fatal(err)
	}
	first, err := aging.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: "q", Priority: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Wait, by the database's clock, until the old job has waited 3
	// intervals and a little.
	deadline := time.Now().Add(time.Minute)
	for {
		var waited bool
		if err := db.Pool.QueryRow(ctx, `SELECT now() - scheduled_at >= $2::bigint * interval '1 microsecond' FROM jobfence_jobs WHERE id = $1`,
			old.ID, (3*every + every/3).Microseconds()).Scan(&waited); err != nil {
			t.Fatal(err)
		}
		if waited {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the job never waited 3 intervals")
		}
		time.Sleep(20 * time.Millisecond)
	}
	fresh, err := aging.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: "q", Priority: 3})
	if err != nil {
		t.Fatal(err)
	}
	late, err := aging.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: "q", Priority: 1})
	if err != nil {
		t.Fatal(err)
	}
	priority := func(id int64) int {
		t.Helper()
		j, err := aging.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return j.Priority
	}
	if _, err := plain.Promote(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	if p := priority(old.ID); p != 4 {
		t.Fatalf("without PriorityAging the old job's priority is %d, want 4", p)
	}
	for range 4 {
		if _, err := aging.Promote(ctx, 1000); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		id   int64
		want int
	}{{"the job that waited 3 intervals", old.ID, 1}, {"a job that waited less than one", fresh.ID, 3},
		{"a job at the first priority", first.ID, 1}, {"a job at the first priority inserted later", late.ID, 1}} {
		if p := priority(c.id); p != c.want {
			t.Errorf("%s: priority %d, want %d", c.name, p, c.want)
		}
	}
	jobs := claim(t, aging, "q", 4, time.Minute)
	var order []int64
	for _, j := range jobs {
		order = append(order, j.ID)
	}
	if want := []int64{first.ID, old.ID, late.ID, fresh.ID}; !equalIDs(order, want) {
		t.Fatalf("claimed %v, want %v: the aged job after the first job of priority 1 inserted before it, before the later one", order, want)
	}
}

func equalIDs(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
