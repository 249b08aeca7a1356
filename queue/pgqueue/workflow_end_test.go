package pgqueue_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// requireCancelledBy fails t unless the task named name of workflow id is
// cancelled with the failure policy's reason naming cause.
func requireCancelledBy(t *testing.T, c *pgqueue.Client, id, name, cause string) {
	t.Helper()
	w, err := c.Workflow(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range w.Tasks {
		if tk.TaskName != name {
			continue
		}
		j, err := c.Get(context.Background(), tk.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := `jobfence: dependency failed: task "` + cause + `" was`
		if j.State != queue.StateCancelled || len(j.Errors) == 0 || !strings.Contains(j.Errors[len(j.Errors)-1].Error, want) {
			t.Fatalf("task %s: state %s, errors %+v; want cancelled with %q", name, j.State, j.Errors, want)
		}
		return
	}
	t.Fatalf("workflow %s has no task %q", id, name)
}

// TestWorkflowDeadlineDiscardReleases: a task that the promoter discards
// because its deadline passed before it started applies the failure
// policy as a discard by the worker does: its dependents are cancelled
// with the reason, or run anyway, in the promoter's transaction. A task
// with no dependents is discarded by the promoter's own statement.
func TestWorkflowDeadlineDiscardReleases(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	x := task("x", "dl")
	x.Params.Deadline = time.Now().Add(-time.Second)
	leaf := task("leaf", "dl2")
	leaf.Params.Deadline = time.Now().Add(-time.Second)
	after := task("after", "dl", "x")
	after.RunAnyway = true
	res, err := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: "dl", Tasks: []queue.WorkflowTask{
		x, task("y", "dl", "x"), task("z", "dl", "y"), after, leaf,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Promote(ctx, 100); err != nil {
		t.Fatal(err)
	}
	want := map[string]queue.State{"x": "discarded", "y": "cancelled", "z": "cancelled", "after": "available", "leaf": "discarded"}
	if got := states(t, c, res.ID); !equalStates(got, want) {
		t.Fatalf("states = %v, want %v", got, want)
	}
	requireCancelledBy(t, c, res.ID, "y", "x")
	requireCancelledBy(t, c, res.ID, "z", "y")
}

// TestWorkflowDeleteReleases: a task deleted before it finished (Delete,
// DeleteMatching) cancels its pending dependents with the reason, or lets
// those that run anyway run, in the delete's transaction, rather than
// leaving them pending for good. Deleting a completed task changes
// nothing for its dependents, which its completion released.
func TestWorkflowDeleteReleases(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	after := task("after", "del", "a")
	after.RunAnyway = true
	res, err := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: "del", Tasks: []queue.WorkflowTask{
		task("a", "del"), task("b", "del", "a"), after,
		task("m", "bulkdel"), task("n", "del", "m"),
		task("done", "del2"), task("next", "del2", "done"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, res.Tasks["a"]); err != nil {
		t.Fatal(err)
	}
	if n, err := c.DeleteMatching(ctx, pgqueue.BulkParams{Queue: "bulkdel"}); err != nil || n != 1 {
		t.Fatalf("DeleteMatching = %d, %v; want 1", n, err)
	}
	done := claimOne(t, c, "del2")
	finish(t, c, queue.Finish{Lease: done.Lease(), Outcome: queue.OutcomeComplete, Workflow: true})
	if err := c.Delete(ctx, res.Tasks["done"]); err != nil {
		t.Fatal(err)
	}
	want := map[string]queue.State{"b": "cancelled", "after": "available", "n": "cancelled", "next": "available"}
	if got := states(t, c, res.ID); !equalStates(got, want) {
		t.Fatalf("states = %v, want %v", got, want)
	}
	requireCancelledBy(t, c, res.ID, "b", "a")
	requireCancelledBy(t, c, res.ID, "n", "m")
	var left int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE id = ANY($1)`,
		[]int64{res.Tasks["a"], res.Tasks["m"], res.Tasks["done"]}).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d deleted tasks left (%v)", left, err)
	}
}
