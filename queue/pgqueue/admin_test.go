package pgqueue_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/migrations"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestRetryCompleted: Retry refuses a completed job, which would repeat its
// effects; RetryForce runs it again.
func TestRetryCompleted(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "charge"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Complete(ctx, claim(t, c, "default", 1, time.Minute)[0].Lease()); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("pgqueue: retry job %d: jobfence: the job completed already; retrying it would run it again", res.ID)
	if err := c.Retry(ctx, res.ID); !errors.Is(err, pgqueue.ErrJobCompleted) || err.Error() != want {
		t.Fatalf("Retry of a completed job = %v, want %q", err, want)
	}
	if j, err := c.Get(ctx, res.ID); err != nil || j.State != queue.StateCompleted {
		t.Fatalf("after a refused Retry: %+v, %v; want it completed", j, err)
	}
	if err := c.RetryForce(ctx, res.ID); err != nil {
		t.Fatal(err)
	}
	j := claim(t, c, "default", 1, time.Minute)
	if len(j) != 1 || j[0].ID != res.ID || j[0].Attempt != 2 {
		t.Fatalf("after RetryForce, claimed %+v; want the job's second attempt", j)
	}
	if err := c.RetryForce(ctx, res.ID); err == nil || err.Error() != fmt.Sprintf("pgqueue: retry job %d: it is running", res.ID) {
		t.Fatalf("RetryForce of a running job = %v", err)
	}
}

// TestCheck: a Client on a schema without jobfence's tables says so as both
// migrations.ErrNotMigrated and queue.ErrNotSetUp; a migrated one is fine.
func TestCheck(t *testing.T) {
	ctx := context.Background()
	empty := pgtest.New(t, pgtest.Options{NoMigrate: true})
	err := pgqueue.New(empty.Pool, pgqueue.Config{}).Check(ctx)
	var nm *migrations.NotMigratedError
	if !errors.Is(err, queue.ErrNotSetUp) || !errors.Is(err, migrations.ErrNotMigrated) || !errors.As(err, &nm) || nm.Schema != empty.Schema {
		t.Fatalf("Check on an empty schema = %v, want a NotMigratedError for %s that is also ErrNotSetUp", err, empty.Schema)
	}
	if c, _ := newClient(t); c.Check(ctx) != nil {
		t.Fatalf("Check on a migrated schema = %v", c.Check(ctx))
	}
}

// TestListUnknownState: List refuses a state that does not exist instead of
// listing no job.
func TestListUnknownState(t *testing.T) {
	c, _ := newClient(t)
	_, err := c.List(context.Background(), pgqueue.ListParams{State: "done"})
	want := `pgqueue: list: jobfence: unknown job state "done": want one of available, scheduled, running, retryable, completed, discarded, cancelled`
	if !errors.Is(err, queue.ErrUnknownState) || err.Error() != want {
		t.Fatalf("List(State: done) = %v, want %q", err, want)
	}
}
