package pgqueue_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// TestPruneWorkflows: the pruner removes a workflow once its tasks have
// all been pruned (each finished, then kept for the retention), up to its
// batch a call; a workflow with a task left, finished or not, stays, and
// so does one created within the retention. An Append to a pruned
// workflow says it does not exist. A workflow's task names go with it, and
// stay while it does: a pruned task's name is not given again.
func TestPruneWorkflows(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	insert := func(name string, tasks ...queue.WorkflowTask) queue.WorkflowResult {
		t.Helper()
		res, err := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: name, Tasks: tasks})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	var old []queue.WorkflowResult
	for range 3 {
		old = append(old, insert("old", task("a", "pr"), task("b", "pr", "a")))
	}
	running := insert("running", task("a", "pr2"), task("b", "pr2", "a"))
	recent := insert("recent", task("a", "pr3"))
	// Every task but running's b finishes (a cancel cascades to b).
	for _, r := range append(old, running, recent) {
		if err := c.Cancel(ctx, r.Tasks["a"]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE jobfence_jobs SET state = 'available', finalized_at = NULL, errors = '[]' WHERE id = $1`,
		running.Tasks["b"]); err != nil {
		t.Fatal(err)
	}
	// Finished, and created, two hours ago, but recent's workflow now.
	if _, err := db.Pool.Exec(ctx, `UPDATE jobfence_jobs SET finalized_at = now() - interval '2 hours' WHERE finalized_at IS NOT NULL`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE jobfence_workflows SET created_at = now() - interval '2 hours' WHERE id <> $1`, recent.ID); err != nil {
		t.Fatal(err)
	}
	workflows := func() map[string]bool {
		t.Helper()
		rows, err := db.Pool.Query(ctx, `SELECT id::text FROM jobfence_workflows`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]bool{}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			out[id] = true
		}
		return out
	}
	// A transaction appending a task to a prunable workflow holds it: the
	// pruner passes over it, and it keeps its new task.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	appending := insert("appending", task("a", "pr4"))
	if err := c.Cancel(ctx, appending.Tasks["a"]); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE jobfence_jobs SET finalized_at = now() - interval '2 hours' WHERE id = $1`, appending.Tasks["a"]); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE jobfence_workflows SET created_at = now() - interval '2 hours' WHERE id = $1`, appending.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.InsertWorkflowTx(ctx, tx, queue.WorkflowParams{ID: appending.ID, Tasks: []queue.WorkflowTask{task("late", "pr4")}}); err != nil {
		t.Fatal(err)
	}
	// Batches of 2 until no job is left to prune: each call also removes
	// up to 2 workflows whose tasks are all gone by then.
	for i := 0; ; i++ {
		n, err := c.Prune(ctx, time.Hour, 2)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if i > 20 {
			t.Fatal("Prune kept finding jobs after 20 calls")
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	left := workflows()
	if !left[appending.ID] {
		t.Errorf("workflow %s, which a transaction was appending a task to, was pruned", appending.ID)
	}
	for _, r := range old {
		if left[r.ID] {
			t.Errorf("workflow %s, whose tasks were all pruned, is still there", r.ID)
		}
	}
	if !left[running.ID] || !left[recent.ID] {
		t.Errorf("workflows left = %v; want the running one (%s) and the recent one (%s)", left, running.ID, recent.ID)
	}
	_, err = c.InsertWorkflow(ctx, queue.WorkflowParams{ID: old[0].ID, Tasks: []queue.WorkflowTask{task("c", "pr")}})
	if !errors.Is(err, queue.ErrWorkflowNotFound) {
		t.Fatalf("Append to a pruned workflow: err = %v, want ErrWorkflowNotFound", err)
	}
	names := func(id string) int {
		t.Helper()
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_workflow_tasks WHERE workflow_id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, r := range old {
		if n := names(r.ID); n != 0 {
			t.Errorf("pruned workflow %s has %d task names left, want none", r.ID, n)
		}
	}
	if n := names(running.ID); n != 2 {
		t.Errorf("workflow %s, kept, has %d task names, want its 2", running.ID, n)
	}
	_, err = c.InsertWorkflow(ctx, queue.WorkflowParams{ID: running.ID, Tasks: []queue.WorkflowTask{task("a", "pr2")}})
	if want := `the workflow has a task named "a" already`; !errors.Is(err, queue.ErrInvalidWorkflow) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Append of a task named as one pruned: err = %v, want ErrInvalidWorkflow containing %q", err, want)
	}
}

// TestPruneKeepsAnOutputADependentWaitsFor: a completed task whose
// dependent still waits (for another dependency) outlives the retention,
// so that the dependent reads its output when it runs; once the dependent
// has completed, the pruner takes both.
func TestPruneKeepsAnOutputADependentWaitsFor(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	const q = "keep"
	res, err := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: "slow", Tasks: []queue.WorkflowTask{
		task("a", q), task("slow", q+"-slow"), task("b", q, "a", "slow"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	a := claimOne(t, c, q)
	finish(t, c, queue.Finish{Lease: a.Lease(), Outcome: queue.OutcomeComplete, Workflow: true, Output: []byte(`{"x": 1}`)})
	age := func() {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, `UPDATE jobfence_jobs SET finalized_at = now() - interval '2 hours' WHERE finalized_at IS NOT NULL`); err != nil {
			t.Fatal(err)
		}
	}
	prune := func() int {
		t.Helper()
		total := 0
		for range 10 {
			n, err := c.Prune(ctx, time.Hour, 100)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				return total
			}
			total += n
		}
		t.Fatal("Prune kept finding jobs after 10 calls")
		return 0
	}
	age()
	if n := prune(); n != 0 {
		t.Fatalf("the pruner took %d jobs while b still waits for a's output, want none", n)
	}
	slow := claimOne(t, c, q+"-slow")
	finish(t, c, queue.Finish{Lease: slow.Lease(), Outcome: queue.OutcomeComplete, Workflow: true})
	b := claimOne(t, c, q)
	if b.ID != res.Tasks["b"] {
		t.Fatalf("claimed job %d, want b (%d)", b.ID, res.Tasks["b"])
	}
	out, err := c.TaskOutput(ctx, b.ID, "a")
	if err != nil || string(out) != `{"x": 1}` {
		t.Fatalf("b's read of a's output, past the retention: %s, %v; want {\"x\": 1}", out, err)
	}
	finish(t, c, queue.Finish{Lease: b.Lease(), Outcome: queue.OutcomeComplete, Workflow: true})
	age()
	if n := prune(); n != 3 {
		t.Fatalf("the pruner took %d jobs once b completed, want all 3 tasks", n)
	}
}
