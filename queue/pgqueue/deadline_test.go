package pgqueue_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// invoiceArgs carries its insert defaults, as River's InsertOpts does.
type invoiceArgs struct {
	ID int `json:"id"`
}

func (invoiceArgs) Kind() string { return "invoice" }

func (invoiceArgs) InsertOpts() queue.InsertOpts {
	return queue.InsertOpts{Queue: "billing", Priority: 3, MaxAttempts: 5, Timeout: 7 * time.Second,
		Metadata: map[string]string{"team": "billing", "tier": "gold"}}
}

// TestInsertTakesArgsDefaults: a job inserted with args that carry their
// insert defaults gets them, through Insert, InsertTx and EnqueueMany (COPY
// and keyed), stored and read back by Get and claims; options given at the
// call override them field by field, and Metadata key by key.
func TestInsertTakesArgsDefaults(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	check := func(what string, id int64, prio, attempts int, timeout time.Duration, meta map[string]string) {
		t.Helper()
		j, err := c.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if j.Queue != "billing" || j.Priority != prio || j.MaxAttempts != attempts || j.Timeout != timeout {
			t.Errorf("%s: queue %q, priority %d, max attempts %d, timeout %v; want billing, %d, %d, %v",
				what, j.Queue, j.Priority, j.MaxAttempts, j.Timeout, prio, attempts, timeout)
		}
		for k, v := range meta {
			if j.Metadata[k] != v {
				t.Errorf("%s: metadata %v, want %s=%s", what, j.Metadata, k, v)
			}
		}
	}
	res, err := c.Insert(ctx, invoiceArgs{ID: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	check("no options", res.ID, 3, 5, 7*time.Second, map[string]string{"team": "billing", "tier": "gold"})

	res, err = c.Insert(ctx, invoiceArgs{ID: 2}, &queue.InsertOpts{Priority: 1, Timeout: -1, Metadata: map[string]string{"tier": "silver"}})
	if err != nil {
		t.Fatal(err)
	}
	check("options over the defaults", res.ID, 1, 5, -1, map[string]string{"team": "billing", "tier": "silver"})

	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err = c.InsertTx(ctx, tx, invoiceArgs{ID: 3}, &queue.InsertOpts{MaxAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	check("in a transaction", res.ID, 3, 2, 7*time.Second, nil)

	var ps []queue.EnqueueParams
	for i, o := range []*queue.InsertOpts{nil, {UniqueKey: "invoice-5"}} {
		p, err := queue.Params(invoiceArgs{ID: 4 + i}, o)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	if n, err := c.EnqueueMany(ctx, ps); err != nil || n != 2 {
		t.Fatalf("EnqueueMany: %d, %v", n, err)
	}
	jobs, err := c.List(ctx, pgqueue.ListParams{Queue: "billing"})
	if err != nil || len(jobs) != 5 {
		t.Fatalf("List: %d jobs, %v; want 5", len(jobs), err)
	}
	for _, j := range jobs[:2] {
		check("many", j.ID, 3, 5, 7*time.Second, nil)
	}
	claimed := claim(t, c, "billing", 5, time.Minute)
	if len(claimed) != 5 {
		t.Fatalf("claimed %d jobs of the args type's queue, want 5", len(claimed))
	}
	for _, j := range claimed {
		if j.Timeout == 0 {
			t.Errorf("claimed job %d has no timeout", j.ID)
		}
	}
}

// jobErrors returns job id's state and its errors' texts.
func jobErrors(t *testing.T, c *pgqueue.Client, id int64) (queue.State, []string) {
	t.Helper()
	j, err := c.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range j.Errors {
		out = append(out, e.Error)
	}
	return j.State, out
}

const deadlineReason = "jobfence: job deadline passed"

// TestDeadlineValidation: a deadline before the job's ScheduledAt is
// refused, as the job could never start.
func TestDeadlineValidation(t *testing.T) {
	c, _ := newClient(t)
	now := time.Now()
	_, err := c.Enqueue(context.Background(), queue.EnqueueParams{Kind: "k", ScheduledAt: now.Add(time.Hour), Deadline: now.Add(time.Minute)})
	var ip *queue.InvalidParamsError
	if !errors.As(err, &ip) || ip.Field != "Deadline" {
		t.Fatalf("deadline before ScheduledAt: %v, want an InvalidParamsError on Deadline", err)
	}
}

// TestPromoteDiscardsPastDeadline: a job not started by its deadline,
// whether available (a paused queue, a queue no worker takes) or waiting
// for a retry, is discarded by the next Promote after the deadline, with
// the reason, and is never promoted or claimed; jobs whose deadline has
// not passed, or that have none, are left alone.
func TestPromoteDiscardsPastDeadline(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	// The retry below (due in a second) must be finished well before the
	// deadline however slow the machine: the inserts, the claim and the
	// finish get five seconds.
	deadline := time.Now().Add(6 * time.Second)
	enqueue := func(q string, d time.Time) int64 {
		t.Helper()
		res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: q, Deadline: d})
		if err != nil {
			t.Fatal(err)
		}
		return res.ID
	}
	available := enqueue("unworked", deadline)
	later := enqueue("unworked", time.Now().Add(time.Hour))
	none := enqueue("unworked", time.Time{})
	retrying := enqueue("retry", deadline)
	jobs := claim(t, c, "retry", 1, time.Minute)
	if len(jobs) != 1 {
		t.Fatalf("claimed %d jobs, want 1", len(jobs))
	}
	// A retry due before the deadline stays retryable until the deadline.
	if _, err := c.Finish(ctx, []queue.Finish{{Lease: jobs[0].Lease(), Outcome: queue.OutcomeRetry, Delay: time.Second,
		Error: &queue.AttemptError{Attempt: 1, Error: "boom"}}}); err != nil {
		t.Fatal(err)
	}
	if st, _ := jobErrors(t, c, retrying); st != queue.StateRetryable {
		t.Fatalf("retry before the deadline: %s, want retryable", st)
	}
	if err := c.PauseQueue(ctx, "retry", t.Name()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Promote(ctx, 10); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(deadline) + 10*time.Millisecond)
	// Several promoters may run at once: each discards what it finds.
	testwatch.WaitFor(t, 10*time.Second, "the jobs past their deadline discarded", func() bool {
		if _, err := c.Promote(ctx, 10); err != nil {
			t.Fatal(err)
		}
		a, _ := jobErrors(t, c, available)
		r, _ := jobErrors(t, c, retrying)
		return a == queue.StateDiscarded && r == queue.StateDiscarded
	})
	for _, id := range []int64{available, retrying} {
		_, errs := jobErrors(t, c, id)
		if len(errs) == 0 || !strings.HasPrefix(errs[len(errs)-1], deadlineReason+": not started by ") {
			t.Errorf("job %d errors %q, want the deadline's reason last", id, errs)
		}
	}
	for _, id := range []int64{later, none} {
		if st, errs := jobErrors(t, c, id); st != queue.StateAvailable || len(errs) != 0 {
			t.Errorf("job %d: %s %q, want available with no error", id, st, errs)
		}
	}
	if jobs := claim(t, c, "unworked", 10, time.Minute); len(jobs) != 2 {
		t.Errorf("claimed %d jobs, want the 2 without a passed deadline", len(jobs))
	}
}

// TestFinishPastDeadlineDiscards: a retry or a snooze whose next attempt
// would start after the job's deadline, by the database's clock, discards
// the job with the reason after the attempt's error; one that starts
// before the deadline waits as usual; a retry of a job out of attempts is
// discarded as ever, without the deadline's reason.
func TestFinishPastDeadlineDiscards(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	deadline := time.Now().Add(time.Hour)
	for _, tt := range []struct {
		name     string
		outcome  queue.Outcome
		delay    time.Duration
		attempts int
		want     queue.State
		reason   bool
	}{
		{"retry past the deadline", queue.OutcomeRetry, 2 * time.Hour, 5, queue.StateDiscarded, true},
		{"retry before the deadline", queue.OutcomeRetry, time.Minute, 5, queue.StateRetryable, false},
		{"snooze past the deadline", queue.OutcomeSnooze, 2 * time.Hour, 5, queue.StateDiscarded, true},
		{"snooze before the deadline", queue.OutcomeSnooze, time.Minute, 5, queue.StateScheduled, false},
		{"out of attempts", queue.OutcomeRetry, 2 * time.Hour, 1, queue.StateDiscarded, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			q := strings.ReplaceAll(tt.name, " ", "-")
			res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: q, Deadline: deadline, MaxAttempts: tt.attempts})
			if err != nil {
				t.Fatal(err)
			}
			jobs := claim(t, c, q, 1, time.Minute)
			if len(jobs) != 1 || !jobs[0].Deadline.Equal(deadline.Truncate(time.Microsecond)) {
				t.Fatalf("claimed %+v, want the job with its deadline %v", jobs, deadline)
			}
			stale, err := c.Finish(ctx, []queue.Finish{{Lease: jobs[0].Lease(), Outcome: tt.outcome, Delay: tt.delay,
				Error: &queue.AttemptError{Attempt: 1, Error: "boom"}}})
			if err != nil || len(stale) > 0 {
				t.Fatalf("finish: %v %v", stale, err)
			}
			st, errs := jobErrors(t, c, res.ID)
			if st != tt.want {
				t.Fatalf("state %s, want %s", st, tt.want)
			}
			hasReason := len(errs) == 2 && errs[0] == "boom" && strings.HasPrefix(errs[1], deadlineReason+": its next attempt would start at ")
			if hasReason != tt.reason {
				t.Fatalf("errors %q, want the deadline's reason after the attempt's error: %v", errs, tt.reason)
			}
		})
	}
}

// TestRescuePastDeadlineDiscards: a job whose lease expired and whose
// backoff would start its next attempt after its deadline is discarded by
// the rescuer, with the reason after the lease's.
func TestRescuePastDeadlineDiscards(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	late, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: "rescue", Deadline: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	early, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: "rescue", Deadline: time.Now().Add(3 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if jobs := claim(t, c, "rescue", 2, 50*time.Millisecond); len(jobs) != 2 {
		t.Fatalf("claimed %d jobs, want 2", len(jobs))
	}
	time.Sleep(100 * time.Millisecond)
	n, err := c.Rescue(ctx, queue.RescueParams{Limit: 10, Backoff: func(*queue.Job) time.Duration { return 2 * time.Hour }})
	if err != nil || n != 2 {
		t.Fatalf("rescue: %d, %v; want 2", n, err)
	}
	st, errs := jobErrors(t, c, late.ID)
	if st != queue.StateDiscarded || len(errs) != 2 || !strings.HasPrefix(errs[0], "lease expired") ||
		!strings.HasPrefix(errs[1], deadlineReason+": its next attempt would start at ") {
		t.Fatalf("job rescued past its deadline: %s %q, want discarded with the lease's and the deadline's reasons", st, errs)
	}
	if st, errs := jobErrors(t, c, early.ID); st != queue.StateRetryable || len(errs) != 1 {
		t.Fatalf("job rescued before its deadline: %s %q, want retryable", st, errs)
	}
}
