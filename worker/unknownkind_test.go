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

type newKindArgs struct{}

func (newKindArgs) Kind() string { return "new-kind" }

// TestUnknownKindPutBacksWaitAtMostAMinute: a job whose kind no worker
// knows yet (a slow rolling deploy) is put back again and again, each time
// made due at once as if its wait had passed. Each put-back keeps its
// attempt and waits at most a minute, however many came before (the retry
// policy's n^4 s would be 70 minutes at the 8th); the first ones are
// recorded on the job, later ones only counted, so its row stops growing.
// Once a worker that knows the kind runs, the job completes.
func TestUnknownKindPutBacksWaitAtMostAMinute(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	reg := worker.NewRegistry()
	worker.Add(reg, func(context.Context, *worker.Job[effectArgs]) error { return nil })
	// No promotion: the job comes back only when the test makes it due,
	// so each put-back is seen before the next.
	w := startWorker(t, c, reg, worker.Config{ID: "old", PollInterval: 50 * time.Millisecond, PromoteInterval: time.Hour})

	res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "new-kind"})
	if err != nil {
		t.Fatal(err)
	}
	const putBacks = 12
	var fence int64
	for n := 1; n <= putBacks; n++ {
		if n > 1 {
			// Its wait is over: it is due now.
			if _, err := db.Pool.Exec(ctx, `UPDATE jobfence_jobs SET state = 'available', scheduled_at = now() WHERE id = $1`, res.ID); err != nil {
				t.Fatal(err)
			}
		}
		var wait time.Duration
		testwatch.WaitFor(t, 20*time.Second, "the job put back again", func() bool {
			var st string
			var f int64
			var us int64
			if err := db.Pool.QueryRow(ctx, `SELECT state, fence, (extract(epoch FROM scheduled_at - now()) * 1e6)::bigint FROM jobfence_jobs WHERE id = $1`,
				res.ID).Scan(&st, &f, &us); err != nil {
				t.Fatal(err)
			}
			wait = time.Duration(us) * time.Microsecond
			return st == string(queue.StateScheduled) && f > fence
		})
		j := stateOf(t, c, res.ID)
		fence = j.Fence
		// The worker's wait, less the moments since it was recorded.
		want := min(time.Duration(n*n)*time.Second, time.Minute)
		if wait > want || wait < want*9/10-5*time.Second {
			t.Fatalf("put-back %d waits %v, want %v less up to a tenth", n, wait, want)
		}
		if j.Attempt != 0 {
			t.Fatalf("put-back %d spent an attempt: attempt %d", n, j.Attempt)
		}
		if recorded := min(n, 8); len(j.Errors) != recorded || queue.UnknownKindPutBacks(j.Errors) != recorded {
			t.Fatalf("put-back %d: errors %+v, want the first %d put-backs recorded", n, j.Errors, recorded)
		}
	}
	if s := w.Stats(); s.UnknownKind != putBacks || s.Snoozed != putBacks {
		t.Fatalf("stats %+v, want %d put-backs for an unknown kind", s, putBacks)
	}

	// The deploy replaces the worker with one that knows the kind.
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	reg2 := worker.NewRegistry()
	worker.Add(reg2, func(context.Context, *worker.Job[newKindArgs]) error { return nil })
	startWorker(t, c, reg2, worker.Config{ID: "new", PollInterval: 50 * time.Millisecond})
	if _, err := db.Pool.Exec(ctx, `UPDATE jobfence_jobs SET state = 'available', scheduled_at = now() WHERE id = $1`, res.ID); err != nil {
		t.Fatal(err)
	}
	testwatch.WaitFor(t, 20*time.Second, "the job completed", func() bool {
		return stateOf(t, c, res.ID).State == queue.StateCompleted
	})
}
