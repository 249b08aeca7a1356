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
	want := `pgqueue: list: jobfence: unknown job state "done": want one of available, scheduled, running, retryable, completed, discarded, cancelled, limited, pending`
	if !errors.Is(err, queue.ErrUnknownState) || err.Error() != want {
		t.Fatalf("List(State: done) = %v, want %q", err, want)
	}
}

// TestListPaging: Before and After page through the jobs by ID, newest
// first on every page, and UniqueKey finds the job holding a key.
func TestListPaging(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	var ids []int64
	for i := range 7 {
		p := queue.EnqueueParams{Kind: "page", Queue: "paging"}
		if i == 3 {
			p.UniqueKey = "the-key"
		}
		res, err := c.Enqueue(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ID)
	}
	list := func(p pgqueue.ListParams) []int64 {
		t.Helper()
		p.Queue = "paging"
		jobs, err := c.List(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, j := range jobs {
			out = append(out, j.ID)
		}
		return out
	}
	first := list(pgqueue.ListParams{Limit: 3})
	second := list(pgqueue.ListParams{Limit: 3, Before: first[2]})
	back := list(pgqueue.ListParams{Limit: 3, After: second[0]})
	want := fmt.Sprint([]int64{ids[6], ids[5], ids[4]}, []int64{ids[3], ids[2], ids[1]}, []int64{ids[6], ids[5], ids[4]})
	if got := fmt.Sprint(first, second, back); got != want {
		t.Fatalf("pages %s, want %s", got, want)
	}
	if got := list(pgqueue.ListParams{UniqueKey: "the-key"}); len(got) != 1 || got[0] != ids[3] {
		t.Fatalf("UniqueKey found %v, want [%d]", got, ids[3])
	}
	_, err := c.List(ctx, pgqueue.ListParams{Before: 5, After: 1})
	if !errors.Is(err, pgqueue.ErrBadListParams) || err.Error() != "pgqueue: list: jobfence: bad list parameters: Before and After both set" {
		t.Fatalf("List with Before and After = %v", err)
	}
}

// TestDelete: Delete removes a final or waiting job, refuses a running one
// and says when the job does not exist.
func TestDelete(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	waiting, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "del", UniqueKey: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, waiting.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, waiting.ID); !errors.Is(err, queue.ErrJobNotFound) {
		t.Fatalf("Get after Delete = %v, want ErrJobNotFound", err)
	}
	// Its unique key is free again.
	again, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "del", UniqueKey: "k1"})
	if err != nil || !again.Inserted {
		t.Fatalf("enqueue with the deleted job's key: %+v, %v", again, err)
	}
	running := claim(t, c, "default", 1, time.Minute)[0]
	want := fmt.Sprintf("pgqueue: delete job %d: jobfence: the job is running; cancel it first", running.ID)
	if err := c.Delete(ctx, running.ID); !errors.Is(err, pgqueue.ErrJobRunning) || err.Error() != want {
		t.Fatalf("Delete of a running job = %v, want %q", err, want)
	}
	if j, err := c.Get(ctx, running.ID); err != nil || j.State != queue.StateRunning {
		t.Fatalf("after a refused Delete: %+v, %v", j, err)
	}
	if err := c.Delete(ctx, 1<<40); !errors.Is(err, queue.ErrJobNotFound) {
		t.Fatalf("Delete of an unknown job = %v, want ErrJobNotFound", err)
	}
}
