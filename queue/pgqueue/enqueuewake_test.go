package pgqueue_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/netfault"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestEnqueueWakesWithoutItsReply: Enqueue sends a job's insert and its
// wake-up in one round trip, so a client that stops reading once they
// are sent (its replies held, as a SIGSTOPped process's are) still wakes
// the workers: the server commits the job, then notifies its queue,
// without waiting for the client. Sent after the insert's reply, the
// wake-up would wait for the client to read it.
func TestEnqueueWakesWithoutItsReply(t *testing.T) {
	c, db := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	proxy := netfault.New(t, netfault.TargetOf(t, db.URL), netfault.Forward)
	a := pgqueue.New(db.NewPoolVia(t, proxy.Addr(), 1), pgqueue.Config{Logger: slog.New(slog.DiscardHandler)})
	q := "wake-" + db.Schema
	// Connected, and its statements prepared, before it stops reading.
	if _, err := a.Enqueue(ctx, queue.EnqueueParams{Queue: q, Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	if jobs := claim(t, c, q, 10, time.Minute); len(jobs) != 1 {
		t.Fatalf("claimed %d jobs, want the first one", len(jobs))
	}
	heard := listen(t, db.Pool, "jobfence_insert")

	proxy.SetMode(netfault.StallReplies)
	done := make(chan error, 1)
	go func() {
		_, err := a.Enqueue(ctx, queue.EnqueueParams{Queue: q, Kind: "k"})
		done <- err
	}()
	if !heard(q) {
		t.Fatal("no wake-up of the job's queue while its client reads nothing")
	}
	if jobs := claim(t, c, q, 10, time.Minute); len(jobs) != 1 {
		t.Fatalf("claimed %d jobs after the wake-up, want the job it announced", len(jobs))
	}
	proxy.SetMode(netfault.Forward)
	if err := <-done; err != nil {
		t.Fatalf("the enqueue, its replies let through: %v", err)
	}
}

// TestLimitedEnqueueWakesAtItsGrant: a job inserted limited, with no
// slot free, wakes no worker when it is inserted (its wake-up, sent with
// the insert before the insert's reply says the job is limited, asks the
// limits itself); the grant of the slot a finished job frees wakes them.
// Before it, every limited insert sent the workers to an empty claim.
func TestLimitedEnqueueWakesAtItsGrant(t *testing.T) {
	c, db := newClient(t)
	limited, free := "limited-"+db.Schema, "free-"+db.Schema
	setLimit(t, c, pgqueue.Limit{Name: "one", Queue: limited, Concurrency: 1})
	enqueueN(t, c, queue.EnqueueParams{Queue: limited, Kind: "k"}, 1)
	first := claim(t, c, limited, 10, time.Minute)
	if len(first) != 1 {
		t.Fatalf("claimed %d jobs, want the first one, granted its slot", len(first))
	}
	// The grant's wake-up goes out after its commit, in the background:
	// it must not be the first the listener below hears.
	testwatch.WaitFor(t, time.Minute, "the first grant's wake-up to be sent", func() bool {
		return pgqueue.WakesInFlight(c) == 0
	})
	wakes := pgtest.Listen(t, db.Pool, "jobfence_insert")
	// next returns the next wake-up of either queue; others' are skipped.
	next := func() string {
		t.Helper()
		return wakes.Next(t, freezeWithin, limited, free)
	}
	second := enqueueN(t, c, queue.EnqueueParams{Queue: limited, Kind: "k"}, 1)[0]
	if got := stateOf(t, c, second); got != queue.StateLimited {
		t.Fatalf("the second job is %s, want limited (the first holds the slot)", got)
	}
	enqueueN(t, c, queue.EnqueueParams{Queue: free, Kind: "k"}, 1)
	if got := next(); got != free {
		t.Fatalf("first wake-up of queue %q, want %q's: the limited job woke its workers", got, free)
	}
	complete(t, c, first...)
	if got := next(); got != limited {
		t.Fatalf("wake-up of queue %q after the slot was freed, want %q's", got, limited)
	}
	if jobs := claim(t, c, limited, 10, time.Minute); len(jobs) != 1 || jobs[0].ID != second {
		t.Fatalf("claimed %+v, want the second job", jobs)
	}
}
