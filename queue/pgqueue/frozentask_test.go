package pgqueue_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/sqlfreeze"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
)

// TestFrozenTaskCompleterHoldsNoFanIn: the completion of workflow tasks
// and the release of their dependents go out as one batch that the server
// runs to its commit without the client. A completer frozen as soon as
// that batch is sent has completed its task and decremented the fan-in
// (the row every completion of its dependencies updates) all the same,
// and holds no lock: another completer's task, the fan-in's last
// dependency, completes and releases it at once. Sent in round trips of
// their own, the statements would leave the frozen completer's
// transaction open, the task running and the fan-in short of a
// dependency until the transaction's idle bound ended it.
func TestFrozenTaskCompleterHoldsNoFanIn(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	const q = "frozen-fanin"
	res, err := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: "fan-in", Tasks: []queue.WorkflowTask{
		task("a", q), task("b", q), task("sum", q, "a", "b"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	jobs := claim(t, c, q, 10, time.Minute)
	if len(jobs) != 2 {
		t.Fatalf("claimed %d tasks, want a and b", len(jobs))
	}
	a, fz := frozenClient(t, db)
	fz.Arm(sqlfreeze.Point{Match: mentions("SET state = 'completed', finalized_at = now()"), Sent: true, Batch: true})
	done := make(chan error, 1)
	go func() {
		stale, err := a.Finish(ctx, []queue.Finish{{Lease: jobs[0].Lease(), Outcome: queue.OutcomeComplete, Workflow: true}})
		if err == nil && len(stale) > 0 {
			err = context.Canceled
		}
		done <- err
	}()
	pid := fz.Frozen(t, freezeWithin)
	// The batch may reach the server after the freeze: its work is waited
	// for first (the backend is idle before it arrives too), then the
	// backend must hold nothing. Sent in round trips of their own, the
	// statements would leave the task running for good.
	testwatch.WaitFor(t, freezeWithin, "the frozen completer's task to complete", func() bool {
		return stateOf(t, c, jobs[0].ID) == queue.StateCompleted
	})
	sqlfreeze.WaitIdle(t, db.Pool, pid, freezeWithin)
	finish(t, c, queue.Finish{Lease: jobs[1].Lease(), Outcome: queue.OutcomeComplete, Workflow: true})
	if got := states(t, c, res.ID)["sum"]; got != queue.StateAvailable {
		t.Fatalf("sum is %s after both its dependencies completed, want available", got)
	}
	fz.Thaw()
	if err := <-done; err != nil {
		t.Fatalf("the thawed Finish: %v", err)
	}
	sum := claimOne(t, c, q)
	if sum.TaskName != "sum" {
		t.Fatalf("claimed %q, want sum", sum.TaskName)
	}
}
