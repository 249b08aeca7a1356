package pgqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// task is a workflow task of kind k on queue q.
func task(name, q string, deps ...string) queue.WorkflowTask {
	return queue.WorkflowTask{Name: name, Params: queue.EnqueueParams{Kind: "k", Queue: q, Args: []byte(`{"task":"` + name + `"}`)}, DependsOn: deps}
}

// states reads the workflow's tasks' states by name.
func states(t *testing.T, c *pgqueue.Client, id string) map[string]queue.State {
	t.Helper()
	w, err := c.Workflow(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]queue.State{}
	for _, tk := range w.Tasks {
		out[tk.TaskName] = tk.State
	}
	return out
}

// claimOne claims the one job ready on q, failing if there is not exactly one.
func claimOne(t *testing.T, c *pgqueue.Client, q string) *queue.Job {
	t.Helper()
	jobs := claim(t, c, q, 10, time.Minute)
	if len(jobs) != 1 {
		names := []string{}
		for _, j := range jobs {
			names = append(names, j.TaskName)
		}
		t.Fatalf("claimed %d jobs on %s (%v), want 1", len(jobs), q, names)
	}
	return jobs[0]
}

func finish(t *testing.T, c *pgqueue.Client, fs ...queue.Finish) []queue.Lease {
	t.Helper()
	stale, err := c.Finish(context.Background(), fs)
	if err != nil {
		t.Fatal(err)
	}
	return stale
}

// TestOutputIsWrittenByTheFencedCompletion: a completion stores its
// output, in the batched statement, in the mixed one and in a
// transaction; a stale attempt's completion stores nothing and leaves
// the accepted attempt's output.
func TestOutputIsWrittenByTheFencedCompletion(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	for _, mode := range []string{"complete", "finish", "tx"} {
		t.Run(mode, func(t *testing.T) {
			q := "out-" + mode
			if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: q}); err != nil {
				t.Fatal(err)
			}
			old := claimOne(t, c, q)
			// The old attempt's lease runs out; another attempt claims the job.
			if _, err := db.Pool.Exec(ctx, `UPDATE jobfence_jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, old.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Rescue(ctx, queue.RescueParams{Limit: 10}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Promote(ctx, 10); err != nil {
				t.Fatal(err)
			}
			cur := claimOne(t, c, q)
			complete := func(j *queue.Job, out string) error {
				f := queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeComplete, Output: []byte(out)}
				switch mode {
				case "complete":
					if stale := finish(t, c, f); len(stale) > 0 {
						return &queue.StaleFenceError{Lease: j.Lease()}
					}
				case "finish":
					// Mixed with another outcome: finishSQL.
					if stale := finish(t, c, f, queue.Finish{Lease: queue.Lease{ID: -1, Fence: 1}, Outcome: queue.OutcomeRetry}); len(stale) > 1 {
						return &queue.StaleFenceError{Lease: j.Lease()}
					}
				case "tx":
					tx, err := db.Pool.Begin(ctx)
					if err != nil {
						t.Fatal(err)
					}
					defer tx.Rollback(ctx)
					if err := c.FinishTx(ctx, tx, f); err != nil {
						return err
					}
					return tx.Commit(ctx)
				}
				return nil
			}
			if err := complete(cur, `{"by":"current","nul":"a\u0000b"}`); err != nil {
				t.Fatal(err)
			}
			if err := complete(old, `{"by":"zombie"}`); !errors.Is(err, queue.ErrStaleFence) {
				t.Fatalf("the zombie's completion = %v, want stale", err)
			}
			j, err := c.Get(ctx, cur.ID)
			if err != nil {
				t.Fatal(err)
			}
			var out map[string]string
			if err := json.Unmarshal(j.Output, &out); err != nil || out["by"] != "current" || out["nul"] != "a\uFFFDb" {
				t.Fatalf("output = %s (%v), want the current attempt's, its NUL replaced", j.Output, err)
			}
		})
	}
}

// TestWorkflowReleasesDependentsOnce: a diamond (a -> b, c -> d) plus
// a task that needs a and x. Only a is ready at first; its completion makes
// b and c available in the same statement; d waits for both. A zombie
// attempt of a completes after the accepted one: it is stale, releases
// nothing again, and a's output stays the accepted attempt's.
func TestWorkflowReleasesDependentsOnce(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	const q = "wf"
	res, err := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: "diamond", Tasks: []queue.WorkflowTask{
		task("d", q, "b", "c"), task("b", q, "a"), task("c", q, "a"), task("a", q), task("x", "elsewhere"), task("ax", q, "a", "x"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Tasks["a"] >= res.Tasks["b"] || res.Tasks["b"] >= res.Tasks["d"] || res.Tasks["c"] >= res.Tasks["d"] {
		t.Fatalf("task IDs %v: a dependency's ID must be below its dependents'", res.Tasks)
	}
	want := map[string]queue.State{"a": "available", "x": "available", "b": "pending", "c": "pending", "d": "pending", "ax": "pending"}
	if got := states(t, c, res.ID); !equalStates(got, want) {
		t.Fatalf("states after insert = %v, want %v", got, want)
	}
	old := claimOne(t, c, q)
	if old.TaskName != "a" || old.WorkflowID != res.ID {
		t.Fatalf("claimed %q of workflow %q, want a of %s", old.TaskName, old.WorkflowID, res.ID)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE jobfence_jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, old.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Rescue(ctx, queue.RescueParams{Limit: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Promote(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if s := states(t, c, res.ID)["b"]; s != queue.StatePending {
		t.Fatalf("b is %s after a's rescue, want pending", s)
	}
	cur := claimOne(t, c, q)
	if stale := finish(t, c, queue.Finish{Lease: cur.Lease(), Outcome: queue.OutcomeComplete, Output: []byte(`"accepted"`), Workflow: true}); len(stale) != 0 {
		t.Fatalf("the current attempt's completion was stale")
	}
	want = map[string]queue.State{"a": "completed", "x": "available", "b": "available", "c": "available", "d": "pending", "ax": "pending"}
	if got := states(t, c, res.ID); !equalStates(got, want) {
		t.Fatalf("states after a = %v, want %v", got, want)
	}
	if stale := finish(t, c, queue.Finish{Lease: old.Lease(), Outcome: queue.OutcomeComplete, Output: []byte(`"zombie"`), Workflow: true}); len(stale) != 1 {
		t.Fatalf("the zombie's completion was accepted")
	}
	w, err := c.Workflow(ctx, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range w.Tasks {
		switch tk.TaskName {
		case "a":
			if string(tk.Output) != `"accepted"` {
				t.Fatalf("a's output = %s, want the accepted attempt's", tk.Output)
			}
		case "ax":
			if tk.State != queue.StatePending || tk.DepsLeft != 1 {
				t.Fatalf("ax is %s with %d dependencies left, want pending with 1 (x): the zombie released it again", tk.State, tk.DepsLeft)
			}
		}
	}
	// b and c complete in one batch: d becomes available once.
	jobs := claim(t, c, q, 10, time.Minute)
	if len(jobs) != 2 {
		t.Fatalf("claimed %d, want b and c", len(jobs))
	}
	finish(t, c, queue.Finish{Lease: jobs[0].Lease(), Outcome: queue.OutcomeComplete, Workflow: true},
		queue.Finish{Lease: jobs[1].Lease(), Outcome: queue.OutcomeComplete, Workflow: true})
	d := claimOne(t, c, q)
	if d.TaskName != "d" {
		t.Fatalf("claimed %q, want d", d.TaskName)
	}
	// d reads its ancestors' outputs (its dependencies', and a's through
	// them), and only theirs.
	if out, err := c.TaskOutput(ctx, d.ID, "b"); !errors.Is(err, queue.ErrNoOutput) {
		t.Fatalf("d reads b's output = %s, %v; want ErrNoOutput (b recorded none)", out, err)
	}
	if out, err := c.TaskOutput(ctx, d.ID, "a"); err != nil || string(out) != `"accepted"` {
		t.Fatalf("d reads its grandparent a's output = %s, %v; want the accepted attempt's", out, err)
	}
	for _, other := range []string{"x", "ax"} {
		_, err := c.TaskOutput(ctx, d.ID, other)
		if !errors.Is(err, queue.ErrNotAncestor) || !errors.Is(err, queue.ErrNotDependency) ||
			!strings.Contains(err.Error(), "not among the tasks this one depends on, directly or through others") {
			t.Fatalf("d reads %s's output: %v, want ErrNotAncestor", other, err)
		}
	}
	if _, err := c.TaskOutput(ctx, d.ID, "nope"); !errors.Is(err, queue.ErrJobNotFound) || !errors.Is(err, queue.ErrNotAncestor) {
		t.Fatalf("d reads nope's output: %v, want ErrJobNotFound and ErrNotAncestor", err)
	}
}

func equalStates(a, b map[string]queue.State) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestWorkflowFailurePolicy: a discarded task cancels its dependents, and
// theirs, with the reason; a task that runs anyway becomes available.
// Retrying the workflow resumes it; cancelling it cancels what has not run.
func TestWorkflowFailurePolicy(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	const q = "fail"
	anyway := task("cleanup", q, "charge")
	anyway.RunAnyway = true
	res, err := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: "order", Tasks: []queue.WorkflowTask{
		task("charge", q), task("reserve", q, "charge"), task("receipt", q, "charge"), task("ship", q, "reserve", "receipt"), anyway,
	}})
	if err != nil {
		t.Fatal(err)
	}
	charge := claimOne(t, c, q)
	finish(t, c, queue.Finish{Lease: charge.Lease(), Outcome: queue.OutcomeDiscard, Workflow: true,
		Error: &queue.AttemptError{Attempt: 1, Error: "card refused"}})
	want := map[string]queue.State{"charge": "discarded", "reserve": "cancelled", "receipt": "cancelled", "ship": "cancelled", "cleanup": "available"}
	if got := states(t, c, res.ID); !equalStates(got, want) {
		t.Fatalf("states = %v, want %v", got, want)
	}
	w, err := c.Workflow(ctx, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range w.Tasks {
		var last string
		if len(tk.Errors) > 0 {
			last = tk.Errors[len(tk.Errors)-1].Error
		}
		switch tk.TaskName {
		case "reserve":
			if last != `jobfence: dependency failed: task "charge" was discarded; cancelled` {
				t.Fatalf("reserve's reason = %q", last)
			}
		case "ship":
			if !strings.HasPrefix(last, `jobfence: dependency failed: task "re`) || !strings.HasSuffix(last, `" was cancelled; cancelled`) {
				t.Fatalf("ship's reason = %q", last)
			}
		}
	}
	if _, err := c.TaskOutput(ctx, claimOne(t, c, q).ID, "charge"); !errors.Is(err, queue.ErrNoOutput) || !strings.Contains(err.Error(), "the task is discarded") {
		t.Fatalf("cleanup reads charge's output: %v, want ErrNoOutput naming its state", err)
	}
	// Resume: charge runs again; its dependents wait for it.
	n, err := c.RetryWorkflow(ctx, res.ID)
	if err != nil || n != 4 {
		t.Fatalf("RetryWorkflow = %d, %v; want 4 tasks reset", n, err)
	}
	want = map[string]queue.State{"charge": "available", "reserve": "pending", "receipt": "pending", "ship": "pending", "cleanup": "running"}
	if got := states(t, c, res.ID); !equalStates(got, want) {
		t.Fatalf("states after retry = %v, want %v", got, want)
	}
	charge = claimOne(t, c, q)
	finish(t, c, queue.Finish{Lease: charge.Lease(), Outcome: queue.OutcomeComplete, Workflow: true})
	if got := states(t, c, res.ID); got["reserve"] != "available" || got["receipt"] != "available" || got["ship"] != "pending" {
		t.Fatalf("states after charge completed = %v", got)
	}
	n, err = c.CancelWorkflow(ctx, res.ID)
	if err != nil || n != 3 {
		t.Fatalf("CancelWorkflow = %d, %v; want reserve, receipt and ship cancelled", n, err)
	}
	if got := states(t, c, res.ID); got["ship"] != "cancelled" || got["cleanup"] != "running" {
		t.Fatalf("states after cancel = %v", got)
	}
	if _, err := c.CancelWorkflow(ctx, "00000000-0000-0000-0000-000000000000"); !errors.Is(err, queue.ErrWorkflowNotFound) {
		t.Fatalf("cancel of an unknown workflow: %v", err)
	}
	ws, err := c.ListWorkflows(ctx, time.Time{}, 10)
	if err != nil || len(ws) != 1 || ws[0].Name != "order" || ws[0].Total() != 5 || ws[0].Counts[queue.StateCancelled] != 3 {
		t.Fatalf("ListWorkflows = %+v, %v", ws, err)
	}
}

// TestWorkflowTasksAddedWhileItRuns: tasks added to a running workflow
// may depend on its tasks whatever their state: a completed one counts as
// done, a running one releases them once it has completed, at the
// promoter's next pass.
func TestWorkflowTasksAddedWhileItRuns(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	const q = "dyn"
	res, err := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: "dyn", Tasks: []queue.WorkflowTask{task("a", q), task("b", q, "a")}})
	if err != nil {
		t.Fatal(err)
	}
	a := claimOne(t, c, q)
	finish(t, c, queue.Finish{Lease: a.Lease(), Outcome: queue.OutcomeComplete, Workflow: true})
	b := claimOne(t, c, q) // running
	add, err := c.InsertWorkflow(ctx, queue.WorkflowParams{ID: res.ID, Tasks: []queue.WorkflowTask{
		task("after-a", q, "a"), task("after-b", q, "b"), task("after-both", q, "after-a", "after-b"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if add.ID != res.ID || len(add.Tasks) != 3 {
		t.Fatalf("added %+v", add)
	}
	want := map[string]queue.State{"a": "completed", "b": "running", "after-a": "available", "after-b": "pending", "after-both": "pending"}
	if got := states(t, c, res.ID); !equalStates(got, want) {
		t.Fatalf("states = %v, want %v", got, want)
	}
	finish(t, c, queue.Finish{Lease: b.Lease(), Outcome: queue.OutcomeComplete, Workflow: true})
	if _, err := c.Promote(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if got := states(t, c, res.ID); got["after-b"] != "available" || got["after-both"] != "pending" {
		t.Fatalf("states after b = %v", got)
	}
	_, err = c.InsertWorkflow(ctx, queue.WorkflowParams{ID: res.ID, Tasks: []queue.WorkflowTask{task("a", q)}})
	if !errors.Is(err, queue.ErrInvalidWorkflow) || !strings.Contains(err.Error(), `the workflow has a task named "a" already`) {
		t.Fatalf("adding a task named a again: %v", err)
	}
}

// TestWorkflowValidation: what cannot be inserted is refused with a clear
// error, and nothing is inserted.
func TestWorkflowValidation(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	uq := task("u", "v")
	uq.Params.UniqueKey = "k"
	both := task("b", "v", "a")
	both.RunAnyway, both.RunOnFailure = true, true
	lone := task("r", "v")
	lone.RunOnFailure = true
	for _, tt := range []struct {
		name string
		p    queue.WorkflowParams
		want string
	}{
		{"no name", queue.WorkflowParams{Tasks: []queue.WorkflowTask{task("a", "v")}}, "a new workflow needs a name"},
		{"no tasks", queue.WorkflowParams{Name: "w"}, "no tasks"},
		{"task name", queue.WorkflowParams{Name: "w", Tasks: []queue.WorkflowTask{task("", "v")}}, "task 0 has no name"},
		{"duplicate", queue.WorkflowParams{Name: "w", Tasks: []queue.WorkflowTask{task("a", "v"), task("a", "v")}}, `two tasks are named "a"`},
		{"unknown dependency", queue.WorkflowParams{Name: "w", Tasks: []queue.WorkflowTask{task("a", "v", "z")}}, `task "a" depends on "z", which the workflow has no task of`},
		{"cycle", queue.WorkflowParams{Name: "w", Tasks: []queue.WorkflowTask{task("a", "v", "c"), task("b", "v", "a"), task("c", "v", "b")}}, "a cycle: [a c b a]"},
		{"unique key", queue.WorkflowParams{Name: "w", Tasks: []queue.WorkflowTask{uq}}, `task "u" has a unique key`},
		{"both policies", queue.WorkflowParams{Name: "w", Tasks: []queue.WorkflowTask{task("a", "v"), both}},
			`task "b" sets both RunAnyway and RunOnFailure: a task runs whatever its dependencies' outcome, or only if one failed, not both`},
		{"compensation of nothing", queue.WorkflowParams{Name: "w", Tasks: []queue.WorkflowTask{lone}},
			`task "r" sets RunOnFailure without DependsOn: it would never run`},
		{"unknown workflow", queue.WorkflowParams{ID: "00000000-0000-0000-0000-000000000001", Tasks: []queue.WorkflowTask{task("a", "v")}}, "workflow not found"},
		{"bad ID", queue.WorkflowParams{ID: "nope", Tasks: []queue.WorkflowTask{task("a", "v")}}, `workflow ID "nope" is not a UUID`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.InsertWorkflow(ctx, tt.p)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM jobfence_jobs) + (SELECT count(*) FROM jobfence_workflows)`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows left behind (%v)", n, err)
	}
}

// TestWorkflowCancelAndRescueReleaseToo: a task cancelled by request, or
// discarded by the rescue when its last attempt's lease ran out, cancels
// its dependents in the same transaction.
func TestWorkflowCancelAndRescueReleaseToo(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	x := task("x", "cr")
	x.Params.MaxAttempts = 1
	res, err := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: "cr", Tasks: []queue.WorkflowTask{
		x, task("y", "cr", "x"), task("p", "cr2"), task("q", "cr2", "p"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(ctx, res.Tasks["p"]); err != nil {
		t.Fatal(err)
	}
	claimOne(t, c, "cr")
	if _, err := db.Pool.Exec(ctx, `UPDATE jobfence_jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, res.Tasks["x"]); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Rescue(ctx, queue.RescueParams{Limit: 10}); err != nil || n != 1 {
		t.Fatalf("Rescue = %d, %v", n, err)
	}
	want := map[string]queue.State{"x": "discarded", "y": "cancelled", "p": "cancelled", "q": "cancelled"}
	if got := states(t, c, res.ID); !equalStates(got, want) {
		t.Fatalf("states = %v, want %v", got, want)
	}
}

// TestWorkflowTasksUnderALimit: a task that a limit governs waits for a
// slot (limited) once its dependencies are done, as any job of its queue
// does: a release never makes it available past the limit.
func TestWorkflowTasksUnderALimit(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	const q = "lim"
	if err := c.SetLimit(ctx, pgqueue.Limit{Name: "one", Queue: q, Concurrency: 1}); err != nil {
		t.Fatal(err)
	}
	res, err := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: "lim", Tasks: []queue.WorkflowTask{
		task("root", q), task("a", q, "root"), task("b", q, "root"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := states(t, c, res.ID); got["root"] != queue.StateLimited || got["a"] != queue.StatePending {
		t.Fatalf("states after insert = %v, want root limited", got)
	}
	if _, err := c.GrantWaiting(ctx, 100); err != nil {
		t.Fatal(err)
	}
	root := claimOne(t, c, q)
	// The completion releases a and b as limited, then gives root's slot
	// to one of them at once (Finish's grant); another grant pass gives
	// none to the other while that one holds it.
	finish(t, c, queue.Finish{Lease: root.Lease(), Outcome: queue.OutcomeComplete, Workflow: true})
	if _, err := c.GrantWaiting(ctx, 100); err != nil {
		t.Fatal(err)
	}
	got := states(t, c, res.ID)
	if n := btoi(got["a"] == queue.StateAvailable) + btoi(got["b"] == queue.StateAvailable); n != 1 ||
		btoi(got["a"] == queue.StateLimited)+btoi(got["b"] == queue.StateLimited) != 1 {
		t.Fatalf("states after root = %v, want one of a and b available and the other limited (concurrency 1)", got)
	}
}

// TestLimitSetWhileAWorkflowWaits: a limit set after a workflow was
// inserted governs its tasks as they are released, as it does the jobs
// already available when it is set: root's completion releases a and b
// limited, not available, and the limit lets one run at a time.
func TestLimitSetWhileAWorkflowWaits(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	const q = "later"
	res, err := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: "later", Tasks: []queue.WorkflowTask{
		task("root", q), task("a", q, "root"), task("b", q, "root"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	root := claimOne(t, c, q)
	if err := c.SetLimit(ctx, pgqueue.Limit{Name: "later", Queue: q, Concurrency: 1}); err != nil {
		t.Fatal(err)
	}
	finish(t, c, queue.Finish{Lease: root.Lease(), Outcome: queue.OutcomeComplete, Workflow: true})
	w, err := c.Workflow(ctx, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range w.Tasks {
		if tk.TaskName != "root" && (tk.State != queue.StateLimited || tk.Limit != "later") {
			t.Fatalf("%s is %s under limit %q after root completed, want limited under the limit set meanwhile", tk.TaskName, tk.State, tk.Limit)
		}
	}
	if _, err := c.GrantWaiting(ctx, 100); err != nil {
		t.Fatal(err)
	}
	got := states(t, c, res.ID)
	if n := btoi(got["a"] == queue.StateAvailable) + btoi(got["b"] == queue.StateAvailable); n != 1 {
		t.Fatalf("states after a grant = %v, want one of a and b available (concurrency 1)", got)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
