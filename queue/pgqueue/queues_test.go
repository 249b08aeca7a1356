package pgqueue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestPauseResumeQueue: pausing records who and when, is idempotent (the
// first pauser stays on record), creates the row of a queue without jobs,
// and resuming clears it; Queues lists queues with jobs or a row.
func TestPauseResumeQueue(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	for _, q := range []string{"mail", "mail", "reports"} {
		if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: q}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: "reports", ScheduledAt: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	before := time.Now().Add(-time.Minute)
	if err := c.PauseQueue(ctx, "mail", "alice@ops"); err != nil {
		t.Fatal(err)
	}
	if err := c.PauseQueue(ctx, "mail", "bob@ops"); err != nil {
		t.Fatal(err)
	}
	if err := c.PauseQueue(ctx, "empty", "bob@ops"); err != nil {
		t.Fatal(err)
	}
	qs, err := c.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 3 || qs[0].Name != "empty" || qs[1].Name != "mail" || qs[2].Name != "reports" {
		t.Fatalf("Queues = %+v, want empty, mail, reports", qs)
	}
	empty, mail, reports := qs[0], qs[1], qs[2]
	if !mail.Paused || mail.PausedBy != "alice@ops" || mail.PausedAt.Before(before) || mail.UpdatedBy != "alice@ops" {
		t.Errorf("mail = %+v, want paused by alice@ops (the first pauser)", mail)
	}
	if mail.Counts[queue.StateAvailable] != (pgqueue.Count{N: 2}) || len(mail.Counts) != 1 || mail.OldestAvailable.Before(before) {
		t.Errorf("mail = %+v, want 2 available jobs and an oldest ready job", mail)
	}
	if !empty.Paused || empty.PausedBy != "bob@ops" || len(empty.Counts) != 0 || !empty.OldestAvailable.IsZero() {
		t.Errorf("empty = %+v, want paused by bob@ops with no jobs", empty)
	}
	if reports.Paused || !reports.PausedAt.IsZero() || reports.PausedBy != "" || !reports.UpdatedAt.IsZero() {
		t.Errorf("reports = %+v, want running and never paused", reports)
	}
	if reports.Counts[queue.StateAvailable] != (pgqueue.Count{N: 1}) || reports.Counts[queue.StateScheduled] != (pgqueue.Count{N: 1}) {
		t.Errorf("reports counts = %v, want 1 available and 1 scheduled", reports.Counts)
	}

	if err := c.ResumeQueue(ctx, "mail", "carol@ops"); err != nil {
		t.Fatal(err)
	}
	if err := c.ResumeQueue(ctx, "mail", "dave@ops"); err != nil {
		t.Fatal(err)
	}
	if err := c.ResumeQueue(ctx, "never-paused", "dave@ops"); err != nil {
		t.Fatal(err)
	}
	qs, err = c.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 3 {
		t.Fatalf("after resume, Queues = %+v; resuming a queue that was never paused must not list it", qs)
	}
	if mail = qs[1]; mail.Paused || !mail.PausedAt.IsZero() || mail.PausedBy != "" || mail.UpdatedBy != "carol@ops" {
		t.Errorf("resumed mail = %+v, want running, last changed by carol@ops", mail)
	}
}

// TestPauseQueueNoName: an empty queue name is refused with a message
// that says so, and nothing is written.
func TestPauseQueueNoName(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	for _, tt := range []struct {
		f    func(context.Context, string, string) error
		want string
	}{
		{c.PauseQueue, "pgqueue: pause queue: jobfence: a queue name is required"},
		{c.ResumeQueue, "pgqueue: resume queue: jobfence: a queue name is required"},
	} {
		err := tt.f(ctx, "", "me")
		if !errors.Is(err, pgqueue.ErrNoQueueName) || err.Error() != tt.want {
			t.Errorf("err = %v, want %q", err, tt.want)
		}
	}
	if qs, err := c.Queues(ctx); err != nil || len(qs) != 0 {
		t.Fatalf("Queues = %+v, %v; want none", qs, err)
	}
}
