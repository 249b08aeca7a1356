package pgqueue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestChildInsertIsIdempotentAndFenced: a child workflow's insert applies
// under its parent's fence (a stale attempt inserts nothing), and an
// insert of an ID the parent inserted before returns that workflow with
// its tasks and inserts no other; an ID another workflow holds is
// refused.
func TestChildInsertIsIdempotentAndFenced(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "parent"}); err != nil {
		t.Fatal(err)
	}
	a := claim(t, c, "default", 1, time.Minute)[0]
	child := func(l queue.Lease, id string) (queue.WorkflowResult, error) {
		return c.InsertWorkflow(ctx, queue.WorkflowParams{ID: id, Name: "child", Parent: l, Tasks: []queue.WorkflowTask{
			{Name: "x", Params: queue.EnqueueParams{Kind: "x", Queue: "kids"}},
			{Name: "y", Params: queue.EnqueueParams{Kind: "y", Queue: "kids"}, DependsOn: []string{"x"}}}})
	}
	const id = "7f1e2d3c-4b5a-8697-a8b9-cadbecfd0e1f"
	b := reclaim(t, c, a)
	if _, err := child(a.Lease(), id); !errors.Is(err, queue.ErrStaleFence) {
		t.Fatalf("a stale attempt's child insert = %v, want ErrStaleFence", err)
	}
	first, err := child(b.Lease(), id)
	if err != nil {
		t.Fatal(err)
	}
	again, err := child(b.Lease(), id)
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != first.ID || len(again.Tasks) != 2 || again.Tasks["x"] != first.Tasks["x"] || again.Tasks["y"] != first.Tasks["y"] {
		t.Fatalf("the second insert returned %+v, want the first's %+v", again, first)
	}
	var n int
	if err := c.Pool().QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE queue = 'kids'`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d child tasks (%v), want 2", n, err)
	}
	other, err := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: "plain", Tasks: []queue.WorkflowTask{{Name: "z", Params: queue.EnqueueParams{Kind: "z"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := child(b.Lease(), other.ID); !errors.Is(err, queue.ErrInvalidWorkflow) {
		t.Fatalf("a child insert of another workflow's ID = %v, want ErrInvalidWorkflow", err)
	}
	kids, err := c.ChildWorkflows(ctx, b.ID)
	if err != nil || len(kids) != 1 || kids[0].ID != id || kids[0].ParentJobID != b.ID {
		t.Fatalf("ChildWorkflows = %+v, %v", kids, err)
	}
}

// TestSweepSignalsASuspendedParent: the promoter's sweep signals a parent
// suspended awaiting its child once the child has ended, and not before;
// and a parent that awaits after its child ended finds the signal stored
// by ChildEnded, once.
func TestSweepSignalsASuspendedParent(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "parent"}); err != nil {
		t.Fatal(err)
	}
	p := claim(t, c, "default", 1, time.Minute)[0]
	const id = "1a2b3c4d-5e6f-8a7b-9c8d-0e1f2a3b4c5d"
	if _, err := c.InsertWorkflow(ctx, queue.WorkflowParams{ID: id, Name: "child", Parent: p.Lease(), Tasks: []queue.WorkflowTask{
		{Name: "x", Params: queue.EnqueueParams{Kind: "x", Queue: "kids"}}}}); err != nil {
		t.Fatal(err)
	}
	if ended, err := c.ChildEnded(ctx, p.ID, id); err != nil || ended {
		t.Fatalf("ChildEnded of a running child = %v, %v", ended, err)
	}
	// The parent suspends awaiting the child, as AwaitChild does.
	name := "jobfence:signal:" + pgqueue.ChildSignal(id)
	out, _, _, err := c.AwaitSignal(ctx, p.Lease(), name, pgqueue.ChildSignal(id), time.Hour)
	if err != nil || out != nil {
		t.Fatalf("AwaitSignal = %s, %v; want a wait", out, err)
	}
	if _, err := c.Finish(ctx, []queue.Finish{{Lease: p.Lease(), Outcome: queue.OutcomeSnooze, Await: pgqueue.ChildSignal(id), Delay: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	signals := func() int {
		var n int
		if err := c.Pool().QueryRow(ctx, `SELECT count(*) FROM jobfence_signals WHERE job_id = $1`, p.ID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if _, err := c.Promote(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if n := signals(); n != 0 {
		t.Fatalf("%d signals while the child runs, want none", n)
	}
	x := claim(t, c, "kids", 1, time.Minute)[0]
	if _, err := c.Finish(ctx, []queue.Finish{{Lease: x.Lease(), Outcome: queue.OutcomeComplete, Workflow: true}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Promote(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if n := signals(); n != 1 {
		t.Fatalf("%d signals once the child ended, want 1", n)
	}
	j, err := c.Get(ctx, p.ID)
	if err != nil || j.State != queue.StateAvailable {
		t.Fatalf("the parent is %v (%v), want available", j.State, err)
	}
	if _, err := c.Promote(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if ended, err := c.ChildEnded(ctx, p.ID, id); err != nil || !ended || signals() != 1 {
		t.Fatalf("ChildEnded after the sweep = %v, %v, %d signals; want ended, still one signal", ended, err, signals())
	}
	if _, err := c.ChildEnded(ctx, p.ID+1000, id); !errors.Is(err, pgqueue.ErrNotChild) {
		t.Fatalf("ChildEnded of another job = %v, want ErrNotChild", err)
	}
}
