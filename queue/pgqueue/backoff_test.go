package pgqueue_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// rateLimited reports j's provider's 429 with a Retry-After of d, as a
// worker does for a handler's JobRateLimited: a snooze for d that backs
// j's partition off for d.
func rateLimited(t *testing.T, c *pgqueue.Client, j *queue.Job, d time.Duration) {
	t.Helper()
	stale, err := c.Finish(context.Background(), []queue.Finish{{Lease: j.Lease(), Outcome: queue.OutcomeSnooze,
		Delay: d, Backoff: d, Limit: j.Limit, LimitPartition: j.LimitPartition, Queue: j.Queue}})
	if err != nil || len(stale) > 0 {
		t.Fatalf("rate-limited outcome of job %d: stale %v, err %v", j.ID, stale, err)
	}
}

// backoffUntil reads the backoff of the partition part of limit name
// (every slot row carries it) and the database's clock.
func backoffUntil(t *testing.T, db *pgtest.DB, name, part string) (until, now time.Time) {
	t.Helper()
	var u *time.Time
	if err := db.Pool.QueryRow(context.Background(),
		`SELECT max(backoff_until), now() FROM jobfence_limit_slots WHERE name = $1 AND part = $2`, name, part).Scan(&u, &now); err != nil {
		t.Fatal(err)
	}
	if u != nil {
		until = *u
	}
	return until, now
}

// TestRateLimitedPartitionBacksOff: a job whose provider answered 429
// snoozes for its Retry-After without spending its attempt, and its
// partition grants nothing until then, by the database's clock (not a
// completion's hand-over, not the grant pass), while another partition of
// the same limit runs on; a later 429 extends the backoff, an earlier end
// does not shorten it; when it ends the partition's waiting jobs are
// granted. Run for a concurrency limit (the hand-over and
// grantConcurrencySQL) and for a rate limit (grantSQL).
func TestRateLimitedPartitionBacksOff(t *testing.T) {
	for _, tt := range []struct {
		name  string
		limit pgqueue.Limit
	}{
		{"concurrency", pgqueue.Limit{Name: "provider", Queue: "calls", Concurrency: 3}},
		{"rate", pgqueue.Limit{Name: "provider", Queue: "calls", Rate: 3, Period: time.Second}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, db := newClient(t)
			ctx := context.Background()
			setLimit(t, c, tt.limit)
			a := enqueueN(t, c, queue.EnqueueParams{Kind: "call", Queue: "calls", LimitKey: "a"}, 5)
			b := enqueueN(t, c, queue.EnqueueParams{Kind: "call", Queue: "calls", LimitKey: "b"}, 4)
			if _, err := c.GrantWaiting(ctx, 100); err != nil {
				t.Fatal(err)
			}
			running := map[int64]*queue.Job{}
			for _, j := range claim(t, c, "calls", 6, time.Minute) {
				running[j.ID] = j
			}
			for _, id := range []int64{a[0], a[1], a[2], b[0], b[1], b[2]} {
				if running[id] == nil {
					t.Fatalf("job %d was not claimed: claimed %v", id, running)
				}
			}
			// a[0]: 429, retry after 1s; a[1]: after 100ms, which does
			// not shorten it; a[2]: after 2s, which extends it.
			rateLimited(t, c, running[a[0]], time.Second)
			first, _ := backoffUntil(t, db, "provider", "a")
			rateLimited(t, c, running[a[1]], 100*time.Millisecond)
			if again, _ := backoffUntil(t, db, "provider", "a"); !again.Equal(first) {
				t.Fatalf("an earlier Retry-After moved the backoff from %s to %s", first, again)
			}
			rateLimited(t, c, running[a[2]], 2*time.Second)
			until, now := backoffUntil(t, db, "provider", "a")
			if !until.After(first) || until.Sub(now) < 1900*time.Millisecond {
				t.Fatalf("a later Retry-After left the backoff at %s (was %s, now %s)", until, first, now)
			}
			for _, id := range a[:3] {
				j, err := c.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if j.State != queue.StateScheduled || j.Attempt != 0 {
					t.Fatalf("rate-limited job %d is %s at attempt %d, want scheduled at attempt 0 (not spent)", id, j.State, j.Attempt)
				}
			}
			// Partition b runs on: a completion hands its slot over (or,
			// under the rate, the grant pass grants it a period on).
			complete(t, c, running[b[0]], running[b[1]], running[b[2]])
			if _, err := c.GrantWaiting(ctx, 100); err != nil {
				t.Fatal(err)
			}
			for _, j := range claim(t, c, "calls", 10, time.Minute) {
				if j.LimitPartition != "b" {
					t.Fatalf("job %d of partition %q was granted while it backed off", j.ID, j.LimitPartition)
				}
				complete(t, c, j)
			}
			// Past the first Retry-After, before the last: nothing of a.
			time.Sleep(time.Until(first.Add(150 * time.Millisecond)))
			if _, err := c.GrantWaiting(ctx, 100); err != nil {
				t.Fatal(err)
			}
			for _, id := range a[3:] {
				if st := stateOf(t, c, id); st != queue.StateLimited {
					t.Fatalf("job %d is %s before its partition's backoff ended, want limited", id, st)
				}
			}
			// Then the partition resumes, its first grant no earlier than
			// the backoff's end by the database's clock.
			deadline := time.Now().Add(10 * time.Second)
			for stateOf(t, c, a[3]) == queue.StateLimited {
				if time.Now().After(deadline) {
					t.Fatal("the partition granted nothing after its backoff ended")
				}
				time.Sleep(50 * time.Millisecond)
				if _, err := c.GrantWaiting(ctx, 100); err != nil {
					t.Fatal(err)
				}
			}
			j, err := c.Get(ctx, a[3])
			if err != nil {
				t.Fatal(err)
			}
			if j.ScheduledAt.Before(until) {
				t.Fatalf("job %d was granted at %s, before the backoff's end %s", a[3], j.ScheduledAt, until)
			}
		})
	}
}

// TestRateLimitedWithoutALimitJustSnoozes: a job no limit governs that
// reports a 429 snoozes, its attempt given back, and backs nothing off;
// a stale report (a fence another claim replaced) changes nothing.
func TestRateLimitedWithoutALimitJustSnoozes(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	setLimit(t, c, pgqueue.Limit{Name: "provider", Queue: "calls", Concurrency: 1})
	ids := enqueueN(t, c, queue.EnqueueParams{Kind: "call", Queue: "free"}, 1)
	jobs := claim(t, c, "free", 1, time.Minute)
	if len(jobs) != 1 {
		t.Fatalf("claimed %d jobs", len(jobs))
	}
	rateLimited(t, c, jobs[0], time.Second)
	j, err := c.Get(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if j.State != queue.StateScheduled || j.Attempt != 0 {
		t.Fatalf("job is %s at attempt %d, want scheduled at attempt 0", j.State, j.Attempt)
	}
	limited := enqueueN(t, c, queue.EnqueueParams{Kind: "call", Queue: "calls"}, 1)
	if _, err := c.GrantWaiting(ctx, 100); err != nil {
		t.Fatal(err)
	}
	got := claim(t, c, "calls", 1, time.Minute)
	if len(got) != 1 || got[0].ID != limited[0] {
		t.Fatalf("claimed %v of the limited queue, want job %d", got, limited[0])
	}
	stale := got[0].Lease()
	stale.Fence++
	if s, err := c.Finish(ctx, []queue.Finish{{Lease: stale, Outcome: queue.OutcomeSnooze, Delay: time.Second,
		Backoff: time.Second, Limit: got[0].Limit, LimitPartition: got[0].LimitPartition}}); err != nil || len(s) != 1 {
		t.Fatalf("stale report: stale %v, err %v", s, err)
	}
	if until, _ := backoffUntil(t, db, "provider", got[0].LimitPartition); !until.IsZero() {
		t.Fatalf("a stale report backed the partition off until %s", until)
	}
	if st := stateOf(t, c, limited[0]); st != queue.StateRunning {
		t.Fatalf("the stale report's job is %s, want running", st)
	}
}
