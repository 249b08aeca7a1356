package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

type ratedArgs struct {
	N int `json:"n"`
}

func (ratedArgs) Kind() string { return "rated" }

// TestRateRefillsWhenTheWindowSlides: jobs held back by a rate limit
// start when the window frees a slot, not at the next grant pass. The
// grant pass is an hour away and the jobs finish at once, so no outcome
// comes after the window slides: every job past the first window's is
// granted by the worker's refill loop. A rate of 10 a second over 40 jobs
// takes 3 windows; the bound, 4 times that, is for a loaded machine. No
// window ever holds more starts than the rate.
func TestRateRefillsWhenTheWindowSlides(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	client := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	const rate, n = 10, 40
	if err := client.SetLimit(ctx, pgqueue.Limit{Name: "rated", Queue: "rated", Rate: rate, Period: time.Second}); err != nil {
		t.Fatal(err)
	}
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[ratedArgs]) error { return nil })
	ps := make([]queue.EnqueueParams, n)
	for i := range ps {
		p, err := queue.Params(ratedArgs{N: i}, &queue.InsertOpts{Queue: "rated"})
		if err != nil {
			t.Fatal(err)
		}
		ps[i] = p
	}
	if _, err := client.EnqueueMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	w := startWorker(t, client, reg, worker.Config{Queues: map[string]int{"rated": 10}, PromoteInterval: time.Hour})
	testwatch.WaitFor(t, 2*time.Minute, "every rate-limited job to complete", func() bool {
		var done int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE queue = 'rated' AND state = 'completed'`).Scan(&done); err != nil {
			t.Fatal(err)
		}
		return done == n
	})
	var most int
	var span time.Duration
	err := db.Pool.QueryRow(ctx, `
SELECT (SELECT max((SELECT count(*) FROM jobfence_jobs b WHERE b.queue = 'rated'
            AND b.attempted_at >= a.attempted_at AND b.attempted_at < a.attempted_at + interval '1 second'))
        FROM jobfence_jobs a WHERE a.queue = 'rated'),
       (SELECT max(attempted_at) - min(attempted_at) FROM jobfence_jobs WHERE queue = 'rated')`).Scan(&most, &span)
	if err != nil {
		t.Fatal(err)
	}
	if most > rate {
		t.Fatalf("%d jobs started within a second, the rate allows %d", most, rate)
	}
	if ideal := time.Duration(n/rate-1) * time.Second; span > 4*ideal {
		t.Fatalf("the %d jobs started over %s, want about %s (%d a second), at most %s", n, span, ideal, rate, 4*ideal)
	}
	if s := w.Stats(); s.Refilled == 0 || s.Refilled > n {
		t.Fatalf("stats %+v: want the jobs past the first window granted by the refill loop", s)
	}
	t.Logf("%d jobs at %d a second started over %s", n, rate, span)
}
