package pgqueue_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
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
