package pgqueue_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// insertJobs inserts n jobs of queue q in state with scheduled_at (and,
// for final states, finalized_at) at ago before now, at priority p.
func insertJobs(t *testing.T, db *pgtest.DB, n int, q string, state queue.State, p int, ago time.Duration) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), `
INSERT INTO jobfence_jobs (queue, kind, state, priority, scheduled_at, attempted_at, lease_expires_at, finalized_at)
SELECT $1, 'k', $2, $3, now() - $4::bigint * interval '1 microsecond',
       CASE WHEN $2 <> 'available' THEN now() END,
       CASE WHEN $2 = 'running' THEN now() + interval '1 minute' END,
       CASE WHEN $2 IN ('completed', 'discarded', 'cancelled') THEN now() - $4::bigint * interval '1 microsecond' END
FROM generate_series(1, $5)`, q, string(state), p, ago.Microseconds(), n)
	if err != nil {
		t.Fatal(err)
	}
}

// TestQueuesCountCap: with CountCap 3, a queue's available and discarded
// jobs are counted up to 3 and shown as "3+" beyond; a state counted over
// all queues that holds more than 3 jobs gives lower bounds, "?" for a queue not reached; the oldest ready job
// is exact, across priorities and from a due retryable job. Both claim
// indexes give the same answers, except that under the old one a queue's
// waiting jobs are counted together up to a tenth of the cap, so a
// queue with more cannot say how many are scheduled.
func TestQueuesCountCap(t *testing.T) {
	for _, indexes := range []string{pgtest.ClaimIndex, pgtest.PerStateIndexes} {
		t.Run(indexes, func(t *testing.T) {
			db := pgtest.New(t)
			pgtest.UseClaimIndexes(t, db, indexes)
			ctx := context.Background()
			c := pgqueue.New(db.Pool, pgqueue.Config{CountCap: 3})
			if c.CountCap() != 3 {
				t.Fatalf("CountCap = %d, want 3", c.CountCap())
			}
			insertJobs(t, db, 4, "a", queue.StateAvailable, 1, time.Minute)
			insertJobs(t, db, 1, "a", queue.StateAvailable, 4, 2*time.Hour)
			insertJobs(t, db, 2, "b", queue.StateAvailable, 1, time.Minute)
			insertJobs(t, db, 1, "b", queue.StateScheduled, 1, -time.Hour)
			insertJobs(t, db, 4, "c", queue.StateDiscarded, 1, 2*time.Hour)
			insertJobs(t, db, 1, "c", queue.StateRunning, 1, time.Minute)
			insertJobs(t, db, 1, "e", queue.StateRetryable, 2, 3*time.Hour)
			insertJobs(t, db, 16, "d", queue.StateCompleted, 1, time.Minute)
			if err := c.PauseQueue(ctx, "p", "ops"); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Pool.Exec(ctx, "ANALYZE jobfence_jobs"); err != nil {
				t.Fatal(err)
			}
			qs, err := c.Queues(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]pgqueue.QueueInfo{}
			var names []string
			for _, q := range qs {
				got[q.Name] = q
				names = append(names, q.Name)
			}
			if len(qs) != 6 {
				t.Fatalf("Queues = %v, want a, b, c, d, e, p", names)
			}
			n := func(n int64) pgqueue.Count { return pgqueue.Count{N: n} }
			atLeast := func(n int64) pgqueue.Count { return pgqueue.Count{N: n, AtLeast: true} }
			// Completed and cancelled: the 3 newest finished jobs are all
			// of d's, so every queue's count is a lower bound.
			unknown := atLeast(0)
			want := map[string]map[queue.State]pgqueue.Count{
				"a": {queue.StateAvailable: atLeast(3), queue.StateCompleted: unknown, queue.StateCancelled: unknown},
				"b": {queue.StateAvailable: n(2), queue.StateScheduled: n(1), queue.StateCompleted: unknown, queue.StateCancelled: unknown},
				"c": {queue.StateDiscarded: atLeast(3), queue.StateRunning: n(1), queue.StateCompleted: unknown, queue.StateCancelled: unknown},
				"d": {queue.StateCompleted: atLeast(3), queue.StateCancelled: unknown},
				"e": {queue.StateRetryable: n(1), queue.StateCompleted: unknown, queue.StateCancelled: unknown},
				"p": {queue.StateCompleted: unknown, queue.StateCancelled: unknown},
			}
			if indexes == pgtest.ClaimIndex {
				// A queue's waiting jobs are counted together, up to a
				// tenth of the cap (1): a and b have more, so their
				// first waiting job (by priority and time: available)
				// is all that is known; e's one job is exact.
				for _, q := range []string{"a", "b"} {
					want[q][queue.StateAvailable] = atLeast(1)
					want[q][queue.StateScheduled], want[q][queue.StateRetryable] = unknown, unknown
				}
			}
			for name, counts := range want {
				q := got[name]
				if len(q.Counts) != len(counts) {
					t.Errorf("%s: Counts = %v, want %v", name, q.Counts, counts)
					continue
				}
				for st, c := range counts {
					if q.Count(st) != c {
						t.Errorf("%s: %s = %v, want %v", name, st, q.Count(st), c)
					}
				}
			}
			if d := got["d"]; d.Completed5m != atLeast(3) || d.Completed1h != atLeast(3) {
				t.Errorf("d completed in 5m, 1h = %v, %v; want 3+ each", d.Completed5m, d.Completed1h)
			}
			if b := got["b"]; b.Completed5m != unknown {
				t.Errorf("b completed in 5m = %v, want ? (not reached)", b.Completed5m)
			}
			for name, age := range map[string]time.Duration{"a": 2 * time.Hour, "b": time.Minute, "e": 3 * time.Hour} {
				if d := time.Since(got[name].OldestAvailable); d < age || d > age+time.Minute {
					t.Errorf("%s: oldest ready job %v old, want %v", name, d.Round(time.Second), age)
				}
			}
			for _, name := range []string{"c", "d", "p"} {
				if !got[name].OldestAvailable.IsZero() {
					t.Errorf("%s: oldest ready job at %v, want none", name, got[name].OldestAvailable)
				}
			}
			if !got["p"].Paused || got["p"].PausedBy != "ops" || got["a"].Paused {
				t.Errorf("paused: p %v by %q, a %v; want p only, by ops", got["p"].Paused, got["p"].PausedBy, got["a"].Paused)
			}
		})
	}
}

// TestQueuesCountExact: under the caps every count is exact, and the
// completions of the last 5 minutes and hour are told apart.
func TestQueuesCountExact(t *testing.T) {
	c, db := newClient(t)
	insertJobs(t, db, 2, "q", queue.StateCompleted, 1, time.Minute)
	insertJobs(t, db, 3, "q", queue.StateCompleted, 1, 30*time.Minute)
	insertJobs(t, db, 4, "q", queue.StateCompleted, 1, 3*time.Hour)
	insertJobs(t, db, 1, "q", queue.StateCancelled, 1, time.Minute)
	insertJobs(t, db, 2, "q", queue.StateRunning, 1, time.Minute)
	qs, err := c.Queues(context.Background())
	if err != nil || len(qs) != 1 {
		t.Fatalf("Queues = %+v, %v; want queue q", qs, err)
	}
	q := qs[0]
	if q.Count(queue.StateCompleted) != (pgqueue.Count{N: 9}) || q.Count(queue.StateCancelled) != (pgqueue.Count{N: 1}) ||
		q.Count(queue.StateRunning) != (pgqueue.Count{N: 2}) || len(q.Counts) != 3 {
		t.Errorf("Counts = %v, want 9 completed, 1 cancelled, 2 running", q.Counts)
	}
	if q.Completed5m != (pgqueue.Count{N: 2}) || q.Completed1h != (pgqueue.Count{N: 5}) {
		t.Errorf("completed in 5m, 1h = %v, %v; want 2, 5", q.Completed5m, q.Completed1h)
	}
}

// TestCountString: what a person reads.
func TestCountString(t *testing.T) {
	for _, tt := range []struct {
		c    pgqueue.Count
		want string
	}{
		{pgqueue.Count{}, "0"},
		{pgqueue.Count{N: 999}, "999"},
		{pgqueue.Count{N: 1000}, "1,000"},
		{pgqueue.Count{N: 1234567}, "1,234,567"},
		{pgqueue.Count{N: 10000, AtLeast: true}, "10,000+"},
		{pgqueue.Count{N: 12, AtLeast: true}, "12+"},
		{pgqueue.Count{AtLeast: true}, "?"},
	} {
		if got := tt.c.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.c, got, tt.want)
		}
	}
}
