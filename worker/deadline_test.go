package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

type deadlineArgs struct {
	Fail   bool          `json:"fail"`
	Snooze time.Duration `json:"snooze"`
}

func (deadlineArgs) Kind() string { return "deadline" }

// fixedRetry retries after d.
type fixedRetry time.Duration

func (d fixedRetry) NextRetry(*queue.Job) time.Time { return time.Now().Add(time.Duration(d)) }

// claimOnly is a backend that only claims and finishes: no promoter, so
// nothing but the worker can discard a job past its deadline.
type claimOnly struct{ queue.Backend }

const deadlineReason = "jobfence: job deadline passed"

func lastError(t *testing.T, c *pgqueue.Client, id int64) (queue.State, string) {
	t.Helper()
	j, err := c.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(j.Errors) == 0 {
		return j.State, ""
	}
	return j.State, j.Errors[len(j.Errors)-1].Error
}

// TestDeadlineDiscardsJobClaimedLate: a job claimed after its deadline (by
// the claim's time, the database's) is discarded without its handler
// running, with the reason, also where nothing else discards it first.
func TestDeadlineDiscardsJobClaimedLate(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	client := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	var ran atomic.Int32
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[deadlineArgs]) error {
		ran.Add(1)
		return nil
	})
	w, err := worker.New(claimOnly{client}, reg, worker.Config{Queues: map[string]int{"default": 1}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	res, err := client.Insert(ctx, deadlineArgs{}, &queue.InsertOpts{Deadline: time.Now().Add(200 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	r, err := w.RunOne(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	if r.Outcome != queue.OutcomeDiscard || !errors.Is(r.Err, queue.ErrDeadline) || ran.Load() != 0 {
		t.Fatalf("job claimed after its deadline: %+v, handler ran %d times; want it discarded unrun with ErrDeadline", r, ran.Load())
	}
	if st, last := lastError(t, client, res.ID); st != queue.StateDiscarded || !strings.HasPrefix(last, deadlineReason+": not started by ") {
		t.Fatalf("stored: %s, %q; want discarded with the deadline's reason", st, last)
	}
	if s := w.Stats(); s.Discarded != 1 {
		t.Fatalf("stats %+v, want 1 discarded", s)
	}
}

// TestDeadlineEndsRunningJob: a running job's context ends at its
// deadline, with a cause that is ErrDeadline, when the deadline comes
// before its timeout; its retry, past the deadline, discards it with both
// reasons. A job whose own timeout (its insert's) comes first ends then,
// overriding its kind's longer timeout, and is retried as usual.
func TestDeadlineEndsRunningJob(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	client := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	type seen struct {
		deadline time.Time
		cause    error
	}
	seenCh := make(chan seen, 1)
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[deadlineArgs]) error {
		d, _ := ctx.Deadline()
		<-ctx.Done()
		seenCh <- seen{d, context.Cause(ctx)}
		return ctx.Err()
	}, worker.HandlerOptions{Timeout: time.Hour})
	w, err := worker.New(client, reg, worker.Config{Queues: map[string]int{"default": 1}, Logger: quietLogger(),
		RetryPolicy: fixedRetry(time.Second)})
	if err != nil {
		t.Fatal(err)
	}

	// Time enough for the insert and the claim on a loaded machine: a job
	// past its deadline is not started at all.
	deadline := time.Now().Add(2 * time.Second)
	res, err := client.Insert(ctx, deadlineArgs{}, &queue.InsertOpts{Deadline: deadline})
	if err != nil {
		t.Fatal(err)
	}
	r, err := w.RunOne(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	var s seen
	select {
	case s = <-seenCh:
	case <-time.After(time.Minute):
		t.Fatalf("the handler never saw its context end (ran %+v)", r)
	}
	if want := deadline.Truncate(time.Microsecond); !s.deadline.Equal(want) || !errors.Is(s.cause, queue.ErrDeadline) {
		t.Fatalf("handler's context: deadline %v, cause %v; want %v and ErrDeadline", s.deadline, s.cause, want)
	}
	if r.Outcome != queue.OutcomeDiscard || !errors.Is(r.Err, queue.ErrDeadline) || !errors.Is(r.Err, context.DeadlineExceeded) {
		t.Fatalf("ran %+v; want a discard with the handler's error and the deadline's", r)
	}
	if st, last := lastError(t, client, res.ID); st != queue.StateDiscarded ||
		!strings.Contains(last, "; "+deadlineReason+": its next attempt would start at ") {
		t.Fatalf("stored: %s, %q; want discarded with the deadline's reason after the handler's error", st, last)
	}

	// The job's own timeout, 100ms, before its deadline and its kind's hour.
	start := time.Now()
	res, err = client.Insert(ctx, deadlineArgs{}, &queue.InsertOpts{Deadline: time.Now().Add(time.Hour), Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r, err = w.RunOne(ctx, "default"); err != nil {
		t.Fatal(err)
	}
	s = <-seenCh
	if s.deadline.Before(start.Add(100*time.Millisecond)) || s.deadline.After(time.Now()) || errors.Is(s.cause, queue.ErrDeadline) {
		t.Fatalf("handler's context: deadline %v (started %v), cause %v; want the job's 100ms timeout", s.deadline, start, s.cause)
	}
	if st, _ := lastError(t, client, res.ID); r.Outcome != queue.OutcomeRetry || st != queue.StateRetryable {
		t.Fatalf("timed out before its deadline: %+v, stored %s; want a retry", r, st)
	}
}

// TestRetryPastDeadlineIsDiscarded: a failed attempt whose retry (by the
// retry policy), or a snooze, would start after the job's deadline
// discards the job, with the reason, instead of scheduling it; counted
// as discarded, not retried. One that starts before the deadline is
// retried as usual.
func TestRetryPastDeadlineIsDiscarded(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	client := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[deadlineArgs]) error {
		if job.Args.Snooze > 0 {
			return worker.JobSnooze(job.Args.Snooze)
		}
		return errors.New("boom")
	})
	w, err := worker.New(client, reg, worker.Config{Queues: map[string]int{"default": 1}, Logger: quietLogger(),
		RetryPolicy: fixedRetry(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name     string
		args     deadlineArgs
		deadline time.Duration
		want     queue.State
		outcome  queue.Outcome
	}{
		{"retry past the deadline", deadlineArgs{Fail: true}, 10 * time.Minute, queue.StateDiscarded, queue.OutcomeDiscard},
		{"retry before the deadline", deadlineArgs{Fail: true}, 2 * time.Hour, queue.StateRetryable, queue.OutcomeRetry},
		{"snooze past the deadline", deadlineArgs{Snooze: time.Hour}, 10 * time.Minute, queue.StateDiscarded, queue.OutcomeDiscard},
	} {
		before := w.Stats()
		res, err := client.Insert(ctx, tt.args, &queue.InsertOpts{Deadline: time.Now().Add(tt.deadline)})
		if err != nil {
			t.Fatal(err)
		}
		r, err := w.RunOne(ctx, "default")
		if err != nil {
			t.Fatal(err)
		}
		st, last := lastError(t, client, res.ID)
		if r.Outcome != tt.outcome || st != tt.want {
			t.Fatalf("%s: ran %+v, stored %s %q; want %v, %s", tt.name, r, st, last, tt.outcome, tt.want)
		}
		after := w.Stats()
		if tt.want == queue.StateDiscarded {
			if !strings.Contains(last, deadlineReason+": its next attempt would start at ") || !errors.Is(r.Err, queue.ErrDeadline) {
				t.Errorf("%s: error %q (%v), want the deadline's reason", tt.name, last, r.Err)
			}
			if after.Discarded != before.Discarded+1 || after.Retried != before.Retried || after.Snoozed != before.Snoozed {
				t.Errorf("%s: stats %+v after %+v; want one more discarded only", tt.name, after, before)
			}
		}
	}
}

// timedArgs carries its own timeout.
type timedArgs struct{}

func (timedArgs) Kind() string { return "timed" }

func (timedArgs) InsertOpts() queue.InsertOpts {
	return queue.InsertOpts{Timeout: 100 * time.Millisecond}
}

// TestArgsTypeTimeout: a job of a kind whose args type carries a timeout
// is bounded by it also when it was inserted untyped (a schedule's fire, a
// plain EnqueueParams, with no timeout of its own), before the handler's
// registered one; a timeout given at the insert wins over both.
func TestArgsTypeTimeout(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	client := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	// The handler reports the time its context had left when it started,
	// and whether the context had ended when it returned: a handler's own
	// clock may start after its timeout's, by more than a little on a
	// loaded machine, so how long it ran says less than its deadline does.
	type run struct {
		left  time.Duration
		ended bool
	}
	runs := make(chan run, 1)
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[timedArgs]) error {
		dl, ok := ctx.Deadline()
		if !ok {
			runs <- run{}
			return nil
		}
		left := time.Until(dl)
		select {
		case <-ctx.Done():
		case <-time.After(30 * time.Second):
		}
		runs <- run{left: left, ended: ctx.Err() != nil}
		return nil
	}, worker.HandlerOptions{Timeout: time.Hour})
	w, err := worker.New(client, reg, worker.Config{Queues: map[string]int{"default": 1}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		timeout time.Duration
		// The handler's context must have had at most want left, and more
		// than above: the next-longest timeout in play is well beyond want.
		want, above time.Duration
	}{
		{"untyped, the type's timeout", 0, 100 * time.Millisecond, 0},
		{"the insert's timeout", 3 * time.Second, 3 * time.Second, time.Second},
	} {
		if _, err := client.Enqueue(ctx, queue.EnqueueParams{Kind: "timed", Timeout: tt.timeout}); err != nil {
			t.Fatal(err)
		}
		if _, err := w.RunOne(ctx, "default"); err != nil {
			t.Fatal(err)
		}
		r := <-runs
		if r.left <= tt.above || r.left > tt.want || !r.ended {
			t.Errorf("%s: the handler's context had %v left and ended %v, want at most %v (more than %v) and ended", tt.name, r.left, r.ended, tt.want, tt.above)
		}
	}
}
