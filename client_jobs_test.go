package jobfence_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jobfence/jobfence"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/jobfencetest"
	"github.com/jobfence/jobfence/queue"
)

// wantErr fails t unless err wraps target (when not nil) and its message
// contains each of msgs.
func wantErr(t *testing.T, what string, err, target error, msgs ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", what)
		return
	}
	if target != nil && !errors.Is(err, target) {
		t.Errorf("%s: %v, want it to wrap %v", what, err, target)
	}
	for _, m := range msgs {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("%s: %q does not say %q", what, err, m)
		}
	}
}

// TestClientJobs: the job methods list, count, retry and delete jobs, on
// a client that is not started, and refuse what they cannot do.
func TestClientJobs(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[greet]) error { return nil })
	c := newClient(t, db.Pool, jobfence.Config{Queues: map[string]int{"default": 1}, Handlers: reg})

	var ids []int64
	for _, name := range []string{"a", "b", "c"} {
		r, err := c.Insert(ctx, greet{Name: name}, &jobfence.InsertOpts{Queue: "mail"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	jobs, err := c.List(ctx, jobfence.ListParams{Queue: "mail", Kind: "greet"})
	if err != nil || len(jobs) != 3 || jobs[0].ID != ids[2] {
		t.Fatalf("List: %d jobs, %v; want the 3, newest first", len(jobs), err)
	}
	_, err = c.List(ctx, jobfence.ListParams{Before: 5, After: 1})
	wantErr(t, "List with Before and After", err, jobfence.ErrBadListParams)
	_, err = c.List(ctx, jobfence.ListParams{State: "finished"})
	wantErr(t, "List of an unknown state", err, queue.ErrUnknownState, `"finished"`)

	// A cancelled job retries; a completed one only by force.
	if err := c.Cancel(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := c.Retry(ctx, ids[0]); err != nil {
		t.Fatalf("Retry of a cancelled job: %v", err)
	}
	if st := state(t, c, ids[0]); st != queue.StateAvailable {
		t.Fatalf("retried job is %s, want available", st)
	}
	w := jobfencetest.NewWorker(t, c)
	if rs := w.Drain(ctx, t, "mail"); len(rs) != 3 {
		t.Fatalf("Drain ran %d jobs, want 3", len(rs))
	}
	wantErr(t, "Retry of a completed job", c.Retry(ctx, ids[1]), jobfence.ErrJobCompleted, "retrying it would run it again")
	if err := c.RetryForce(ctx, ids[1]); err != nil {
		t.Fatalf("RetryForce: %v", err)
	}
	counts, err := c.Counts(ctx, "mail")
	if err != nil || counts[queue.StateAvailable] != 1 || counts[queue.StateCompleted] != 2 {
		t.Fatalf("Counts: %v, %v; want 1 available, 2 completed", counts, err)
	}
	if all, err := c.Counts(ctx, ""); err != nil || all[queue.StateCompleted] != 2 {
		t.Errorf("Counts of every queue: %v, %v", all, err)
	}

	// Bulk: refused states say why; the others change what they select.
	_, err = c.RetryMatching(ctx, jobfence.BulkParams{State: queue.StateCompleted})
	wantErr(t, "RetryMatching of completed jobs", err, jobfence.ErrBulkState, "RetryForce")
	_, err = c.DeleteMatching(ctx, jobfence.BulkParams{State: queue.StateRunning})
	wantErr(t, "DeleteMatching of running jobs", err, jobfence.ErrBulkState, "cancel them first")
	if n, err := c.DeleteMatching(ctx, jobfence.BulkParams{Queue: "mail", State: queue.StateCompleted}); err != nil || n != 2 {
		t.Errorf("DeleteMatching of the completed jobs: %d, %v; want 2", n, err)
	}
	if err := c.Cancel(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	if n, err := c.RetryMatching(ctx, jobfence.BulkParams{Kind: "greet", State: queue.StateCancelled}); err != nil || n != 1 {
		t.Errorf("RetryMatching of the cancelled job: %d, %v; want 1", n, err)
	}

	if err := c.Delete(ctx, ids[1]); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	wantErr(t, "Get of a deleted job", func() error { _, err := c.Get(ctx, ids[1]); return err }(), jobfence.ErrJobNotFound)
	wantErr(t, "Delete of an unknown job", c.Delete(ctx, 987654), jobfence.ErrJobNotFound, "987654")
	wantErr(t, "Retry of an unknown job", c.Retry(ctx, 987654), jobfence.ErrJobNotFound, "987654")
}
