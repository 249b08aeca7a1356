package pgqueue_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// slowPoll is a poll interval no test waits for: an await that returns
// within a test's bound was woken by a notification.
const slowPoll = 10 * time.Minute

type awaited struct {
	job *queue.Job
	err error
	at  time.Duration
}

// startAwait runs c.AwaitJob(id) within d in the background, and returns
// its result's channel once the await has read the job unfinished and
// waits (c's await hook, which waiting installs on c).
func startAwait(t *testing.T, c *pgqueue.Client, id int64, d time.Duration) <-chan awaited {
	t.Helper()
	waiting := make(chan struct{}, 64)
	pgqueue.SetAwaitHook(c, func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	})
	out := make(chan awaited, 1)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	start := time.Now()
	go func() {
		defer cancel()
		j, err := c.AwaitJob(ctx, id)
		out <- awaited{j, err, time.Since(start)}
	}()
	select {
	case <-waiting:
	case r := <-out:
		t.Fatalf("AwaitJob(%d) returned before the job ended: %+v", id, r)
	case <-time.After(30 * time.Second):
		t.Fatalf("AwaitJob(%d) did not read the job within 30s", id)
	}
	return out
}

// result waits for an await's result within 30s.
func result(t *testing.T, out <-chan awaited) awaited {
	t.Helper()
	select {
	case r := <-out:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("AwaitJob did not return within 30s of the job's end")
		return awaited{}
	}
}

// TestAwaitJobWokenByNotify: with a poll of ten minutes, AwaitJob returns
// as soon as the job ends, woken by the notification that only an awaited
// job's end sends: completed in place, completed and moved to the
// finished table (the row's delete notifies), discarded and cancelled.
func TestAwaitJobWokenByNotify(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{AwaitPollMin: slowPoll, AwaitPollMax: slowPoll})
	for _, tt := range []struct {
		name    string
		outcome queue.Outcome
		moved   bool
		want    queue.State
	}{
		{"completed in place", queue.OutcomeComplete, false, queue.StateCompleted},
		{"completed and moved", queue.OutcomeComplete, true, queue.StateCompleted},
		{"discarded", queue.OutcomeDiscard, false, queue.StateDiscarded},
		{"cancelled", queue.OutcomeCancel, false, queue.StateCancelled},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.moved {
				if _, err := c.MaintainFinished(ctx, time.Hour); err != nil {
					t.Fatal(err)
				}
			}
			j := claimNew(t, c, queue.EnqueueParams{Kind: "k", Queue: "await"})
			out := startAwait(t, c, j.ID, slowPoll)
			f := queue.Finish{Lease: j.Lease(), Outcome: tt.outcome, Output: []byte(`{"n": 7}`)}
			if tt.outcome != queue.OutcomeComplete {
				f.Error = &queue.AttemptError{Attempt: j.Attempt, At: time.Now(), Error: "card declined"}
			}
			if stale, err := c.Finish(ctx, []queue.Finish{f}); err != nil || len(stale) != 0 {
				t.Fatalf("finish: stale %v, %v", stale, err)
			}
			r := result(t, out)
			if r.err != nil || r.job.ID != j.ID || r.job.State != tt.want {
				t.Fatalf("AwaitJob = %+v, %v; want job %d %s", r.job, r.err, j.ID, tt.want)
			}
			if tt.want == queue.StateCompleted && string(r.job.Output) != `{"n": 7}` {
				t.Errorf("output %s, want {\"n\": 7}", r.job.Output)
			}
			var finished bool
			if err := db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM jobfence_jobs_finished WHERE id = $1)`, j.ID).Scan(&finished); err != nil {
				t.Fatal(err)
			}
			if finished != tt.moved {
				t.Errorf("job in the finished table: %v, want %v", finished, tt.moved)
			}
		})
	}
}

// TestCompletionNotifiesOnlyAwaitedJobs: the completion of a job nobody
// awaits sends no notification (the completions' cost and the server's
// notify lock stay as they were); an awaited one's does.
func TestCompletionNotifiesOnlyAwaitedJobs(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{AwaitPollMin: slowPoll, AwaitPollMax: slowPoll})
	l := pgtest.Listen(t, db.Pool, "jobfence_done")
	a := claimNew(t, c, queue.EnqueueParams{Kind: "k", Queue: "awaited"})
	b := claimNew(t, c, queue.EnqueueParams{Kind: "k", Queue: "unawaited"})
	out := startAwait(t, c, a.ID, slowPoll)
	// b's completion commits first: had it notified, the listener would
	// hear b before a.
	for _, j := range []*queue.Job{b, a} {
		if err := c.Complete(ctx, j.Lease()); err != nil {
			t.Fatal(err)
		}
	}
	ida, idb := strconv.FormatInt(a.ID, 10), strconv.FormatInt(b.ID, 10)
	if got := l.Next(t, 30*time.Second, ida, idb); got != ida {
		t.Fatalf("first notification for job %s, want %s: an unawaited completion notified", got, ida)
	}
	if r := result(t, out); r.err != nil || r.job.State != queue.StateCompleted {
		t.Fatalf("AwaitJob = %+v, %v", r.job, r.err)
	}
}

// TestAwaitJobPollOnly: without LISTEN, AwaitJob polls (its hook runs
// again and again while the job runs) and returns once the job ends.
func TestAwaitJobPollOnly(t *testing.T) {
	db := pgtest.New(t)
	c := pgqueue.New(db.Pool, pgqueue.Config{PollOnly: true, AwaitPollMin: time.Millisecond, AwaitPollMax: 4 * time.Millisecond})
	testPolls(t, c)
}

// testPolls checks that c's AwaitJob polls: it reads the running job
// several times, then finds it completed.
func testPolls(t *testing.T, c *pgqueue.Client) {
	t.Helper()
	ctx := context.Background()
	j := claimNew(t, c, queue.EnqueueParams{Kind: "k", Queue: "poll"})
	reads := make(chan struct{}, 1)
	pgqueue.SetAwaitHook(c, func() {
		select {
		case reads <- struct{}{}:
		default:
		}
	})
	out := make(chan awaited, 1)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		job, err := c.AwaitJob(ctx, j.ID)
		out <- awaited{job: job, err: err}
	}()
	for i := 0; i < 3; i++ {
		select {
		case <-reads:
		case r := <-out:
			t.Fatalf("AwaitJob returned while the job runs: %+v, %v", r.job, r.err)
		case <-time.After(30 * time.Second):
			t.Fatalf("AwaitJob read the job %d times in 30s, want 3", i)
		}
	}
	if err := c.Complete(ctx, j.Lease()); err != nil {
		t.Fatal(err)
	}
	if r := result(t, out); r.err != nil || r.job.State != queue.StateCompleted {
		t.Fatalf("AwaitJob = %+v, %v; want it completed", r.job, r.err)
	}
}

// TestAwaitJobErrors: an ID that names no job is ErrJobNotFound at once,
// saying why; a job that has ended returns at once; ctx ending first is
// ctx's error.
func TestAwaitJobErrors(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	_, err := c.AwaitJob(ctx, 1<<40)
	if !errors.Is(err, queue.ErrJobNotFound) || !strings.Contains(err.Error(), "pruned") {
		t.Errorf("AwaitJob of an unknown ID: %v, want ErrJobNotFound saying it may have been pruned", err)
	}

	done := claimNew(t, c, queue.EnqueueParams{Kind: "k"})
	if err := c.Complete(ctx, done.Lease()); err != nil {
		t.Fatal(err)
	}
	if j, err := c.AwaitJob(ctx, done.ID); err != nil || j.State != queue.StateCompleted {
		t.Errorf("AwaitJob of a completed job: %+v, %v", j, err)
	}

	running := claimNew(t, c, queue.EnqueueParams{Kind: "k"})
	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err = c.AwaitJob(tctx, running.ID)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), strconv.FormatInt(running.ID, 10)) {
		t.Errorf("AwaitJob past its deadline: %v, want context.DeadlineExceeded naming the job", err)
	}
}

// TestAwaitJobBehindPgBouncer: through PgBouncer in transaction mode,
// AwaitJob polls with PollOnly, and with a ListenURL straight to the
// server it is woken by the notification.
func TestAwaitJobBehindPgBouncer(t *testing.T) {
	db := pgtest.NewBounced(t, pgtest.BouncedOptions{PoolSize: 2})
	pool := modePool(t, db.BouncedURL, "cache_describe", 4)
	t.Run("poll only", func(t *testing.T) {
		testPolls(t, pgqueue.New(pool, pgqueue.Config{PollOnly: true, AwaitPollMin: time.Millisecond, AwaitPollMax: 4 * time.Millisecond}))
	})
	t.Run("listen url", func(t *testing.T) {
		c := pgqueue.New(pool, pgqueue.Config{ListenURL: db.DirectURL, AwaitPollMin: slowPoll, AwaitPollMax: slowPoll})
		j := claimNew(t, c, queue.EnqueueParams{Kind: "k", Queue: "bounced"})
		out := startAwait(t, c, j.ID, slowPoll)
		if err := c.Complete(context.Background(), j.Lease()); err != nil {
			t.Fatal(err)
		}
		if r := result(t, out); r.err != nil || r.job.State != queue.StateCompleted {
			t.Fatalf("AwaitJob = %+v, %v", r.job, r.err)
		}
	})
}
