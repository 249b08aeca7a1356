package pgqueue_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestTaskEndingTwiceReleasesItsDependentsOnce (issue 49, case 5): a
// workflow task that ends a second time, after a Retry of its discard or
// a RetryForce of its completion, does not take one off its dependents'
// counts again. The fan-in "sum" (on a and b) stays pending while b
// runs, and becomes available once b completes. Before the fix a's
// second end released sum again, which then ran while b was running.
func TestTaskEndingTwiceReleasesItsDependentsOnce(t *testing.T) {
	for _, path := range []string{"Retry of a discarded task with a RunAnyway dependent", "RetryForce of a completed task"} {
		t.Run(path, func(t *testing.T) {
			c, _ := newClient(t)
			ctx := context.Background()
			const q = "twice"
			sum := task("sum", q, "a", "b")
			first := queue.OutcomeComplete
			if path != "RetryForce of a completed task" {
				sum.RunAnyway = true
				first = queue.OutcomeDiscard
			}
			res, err := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: "twice", Tasks: []queue.WorkflowTask{task("a", q), task("b", q), sum}})
			if err != nil {
				t.Fatal(err)
			}
			jobs := claim(t, c, q, 10, time.Minute)
			if len(jobs) != 2 {
				t.Fatalf("claimed %d tasks, want a and b", len(jobs))
			}
			a, b := jobs[0], jobs[1]
			if a.TaskName != "a" {
				a, b = b, a
			}
			finish(t, c, queue.Finish{Lease: a.Lease(), Outcome: first, Workflow: true, Error: &queue.AttemptError{Attempt: 1, Error: "first end"}})
			if got := states(t, c, res.ID)["sum"]; got != queue.StatePending {
				t.Fatalf("sum is %s after a's first end, while b runs; want pending", got)
			}
			if first == queue.OutcomeComplete {
				err = c.RetryForce(ctx, a.ID)
			} else {
				err = c.Retry(ctx, a.ID)
			}
			if err != nil {
				t.Fatal(err)
			}
			again := claimOne(t, c, q)
			if again.TaskName != "a" {
				t.Fatalf("claimed %q, want a run again", again.TaskName)
			}
			finish(t, c, queue.Finish{Lease: again.Lease(), Outcome: queue.OutcomeComplete, Workflow: true})
			if _, err := c.Promote(ctx, 100); err != nil {
				t.Fatal(err)
			}
			if got := states(t, c, res.ID)["sum"]; got != queue.StatePending {
				t.Fatalf("sum is %s after a ended a second time, while b runs; want pending", got)
			}
			finish(t, c, queue.Finish{Lease: b.Lease(), Outcome: queue.OutcomeComplete, Workflow: true})
			if got := claimOne(t, c, q); got.TaskName != "sum" {
				t.Fatalf("claimed %q once a and b ended, want sum", got.TaskName)
			}
		})
	}
}

// TestRetryWorkflowCountsEachDependencyOnce: RetryWorkflow counts the
// dependencies of the tasks it resets anew, and each one it counts
// releases its dependent once at its end. "a" was forced to run again
// (RetryForce) after its completion had released sum: sum, reset, counts
// it again, and its end releases sum. "late" was appended on "p", which
// was discarded before the promoter took late's edge: late, reset, counts
// p through its edge, and p's completion releases it once. "late2" was
// appended on "c", which completed before the promoter took late2's edge:
// late2, counted anew, does not count c, and the edge releases nothing.
func TestRetryWorkflowCountsEachDependencyOnce(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	const q = "retry-workflow"
	res, err := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: "again", Tasks: []queue.WorkflowTask{
		task("a", q), task("b", q), task("sum", q, "a", "b"), task("p", q), task("c", q),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.InsertWorkflow(ctx, queue.WorkflowParams{ID: res.ID, Tasks: []queue.WorkflowTask{task("late", q, "p", "b"), task("late2", q, "c", "b")}}); err != nil {
		t.Fatal(err)
	}
	byName := map[string]*queue.Job{}
	for _, j := range claim(t, c, q, 10, time.Minute) {
		byName[j.TaskName] = j
	}
	if len(byName) != 4 {
		t.Fatalf("claimed %v, want a, b, c and p", byName)
	}
	finish(t, c, queue.Finish{Lease: byName["a"].Lease(), Outcome: queue.OutcomeComplete, Workflow: true},
		queue.Finish{Lease: byName["c"].Lease(), Outcome: queue.OutcomeComplete, Workflow: true})
	if err := c.RetryForce(ctx, byName["a"].ID); err != nil {
		t.Fatal(err)
	}
	a := claimOne(t, c, q)
	discard := func(j *queue.Job) {
		finish(t, c, queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeDiscard, Workflow: true, Error: &queue.AttemptError{Attempt: 1, Error: "no"}})
	}
	discard(byName["b"])
	discard(byName["p"])
	// b's discard cancelled sum; late and late2, appended on p, c and b,
	// wait for the promoter's sweep, and are pending still.
	if n, err := c.RetryWorkflow(ctx, res.ID); err != nil || n != 3 {
		t.Fatalf("RetryWorkflow = %d, %v; want b, p and sum reset", n, err)
	}
	want := map[string]queue.State{"a": "running", "b": "available", "p": "available", "c": "completed", "sum": "pending", "late": "pending",
		"late2": "pending"}
	if got := states(t, c, res.ID); !equalStates(got, want) {
		t.Fatalf("states after RetryWorkflow = %v, want %v", got, want)
	}
	complete := func(j *queue.Job, then queue.State) {
		t.Helper()
		finish(t, c, queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeComplete, Workflow: true})
		if _, err := c.Promote(ctx, 100); err != nil {
			t.Fatal(err)
		}
		if got := states(t, c, res.ID); got["sum"] != then || got["late"] != then || got["late2"] != then {
			t.Fatalf("states after %s completed = %v; want sum, late and late2 %s", j.TaskName, got, then)
		}
	}
	complete(a, queue.StatePending)
	byName = map[string]*queue.Job{}
	for _, j := range claim(t, c, q, 10, time.Minute) {
		byName[j.TaskName] = j
	}
	if len(byName) != 2 || byName["b"] == nil || byName["p"] == nil {
		t.Fatalf("claimed %v, want b and p", byName)
	}
	complete(byName["p"], queue.StatePending)
	complete(byName["b"], queue.StateAvailable)
}

// TestRetryRefusesAPendingTask: Retry of a workflow task that its
// dependencies have not released (pending, or cancelled while pending) is
// refused (ErrDependenciesPending) and changes nothing; made ready, it ran
// before its dependency (both found by the model test). A bulk retry
// skips such tasks, and asking it for pending ones is an error.
func TestRetryRefusesAPendingTask(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	res, err := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: "pending retry", Tasks: []queue.WorkflowTask{task("a", "rp"), task("b", "rp", "a")}})
	if err != nil {
		t.Fatal(err)
	}
	b := res.Tasks["b"]
	err = c.Retry(ctx, b)
	if !errors.Is(err, pgqueue.ErrDependenciesPending) {
		t.Fatalf("Retry of a pending task = %v, want ErrDependenciesPending", err)
	}
	if want := "dependencies have not released it"; !strings.Contains(err.Error(), want) {
		t.Fatalf("Retry's error %q does not say %s", err, want)
	}
	if _, err := c.RetryMatching(ctx, pgqueue.BulkParams{Queue: "rp", State: queue.StatePending}); !errors.Is(err, pgqueue.ErrBulkState) {
		t.Fatalf("RetryMatching of pending tasks = %v, want ErrBulkState", err)
	}
	if n, err := c.RetryMatching(ctx, pgqueue.BulkParams{Queue: "rp"}); err != nil {
		t.Fatal(err)
	} else if n != 1 {
		t.Fatalf("RetryMatching retried %d jobs, want only the available task a", n)
	}
	if st := stateOf(t, c, b); st != queue.StatePending {
		t.Fatalf("the task is %s after the retries, want pending", st)
	}
	// Cancelled while its dependency runs, the task is no readier: a
	// Retry of it alone is refused too (it ran before a).
	if err := c.Cancel(ctx, b); err != nil {
		t.Fatal(err)
	}
	if err := c.Retry(ctx, b); !errors.Is(err, pgqueue.ErrDependenciesPending) {
		t.Fatalf("Retry of a task cancelled before its dependency released it = %v, want ErrDependenciesPending", err)
	}
	if n, err := c.RetryMatching(ctx, pgqueue.BulkParams{Queue: "rp", State: queue.StateCancelled}); err != nil || n != 0 {
		t.Fatalf("RetryMatching of the cancelled task = %d, %v; want it skipped", n, err)
	}
	// A task appended after its dependency was cancelled is cancelled at
	// insert, and a Retry of it alone is refused as well (found by the
	// model test: it ran while its dependency stayed cancelled).
	more, err := c.InsertWorkflow(ctx, queue.WorkflowParams{ID: res.ID, Tasks: []queue.WorkflowTask{task("late", "rp", "b")}})
	if err != nil {
		t.Fatal(err)
	}
	late := more.Tasks["late"]
	if st := stateOf(t, c, late); st != queue.StateCancelled {
		t.Fatalf("a task appended to a cancelled dependency is %s, want cancelled", st)
	}
	if err := c.Retry(ctx, late); !errors.Is(err, pgqueue.ErrDependenciesPending) {
		t.Fatalf("Retry of a task cancelled at insert for its failed dependency = %v, want ErrDependenciesPending", err)
	}
	got := claimOne(t, c, "rp")
	if got.ID != res.Tasks["a"] {
		t.Fatalf("claimed %d, want the dependency a %d", got.ID, res.Tasks["a"])
	}
}

// TestCancelOfATaskOnABrokenConnectionReleasesOrFails: a Cancel whose
// read of the job fails (its connection's backend was terminated, as a
// server restart or an operator's pg_terminate_backend does) either fails
// and changes nothing, or cancels the task with its release. Before the
// fix the failed read made Cancel take the task for a plain job: it was
// cancelled on another connection without its release, and its RunAnyway
// dependent waited for ever (the model test, seed 9119).
func TestCancelOfATaskOnABrokenConnectionReleasesOrFails(t *testing.T) {
	_, db := newClient(t)
	ctx := context.Background()
	pool := pgtest.AppPool(t, db, "cancelbroken", 1)
	c := pgqueue.New(pool, pgqueue.Config{})
	after := task("after", "broken", "a")
	after.RunAnyway = true
	res, err := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: "broken", Tasks: []queue.WorkflowTask{task("a", "broken"), after}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'cancelbroken'`); err != nil {
		t.Fatal(err)
	}
	var tries []string
	for range 3 {
		err := c.Cancel(ctx, res.Tasks["a"])
		if err == nil {
			break
		}
		tries = append(tries, err.Error())
		if got := states(t, c, res.ID)["a"]; got == queue.StateCancelled {
			t.Fatalf("a failed Cancel (%v) cancelled a", err)
		}
	}
	if got := states(t, c, res.ID); got["a"] != queue.StateCancelled || got["after"] != queue.StateAvailable {
		t.Fatalf("after Cancel of a (failed tries: %q): a %s, after %s; want cancelled and available (a RunAnyway dependent released)", tries, got["a"], got["after"])
	}
}
