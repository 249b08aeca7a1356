package pgqueue_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// noFailure is the reason recorded on a compensation cancelled because
// every dependency completed.
const noFailure = "jobfence: no dependency failed: every dependency completed, and the task runs only if one fails (RunOnFailure); cancelled"

// onFailure is task with RunOnFailure.
func onFailure(name, q string, deps ...string) queue.WorkflowTask {
	t := task(name, q, deps...)
	t.RunOnFailure = true
	return t
}

// anyway is task with RunAnyway.
func anyway(name, q string, deps ...string) queue.WorkflowTask {
	t := task(name, q, deps...)
	t.RunAnyway = true
	return t
}

// lastErrors reads each task's last recorded error, by name.
func lastErrors(t *testing.T, c *pgqueue.Client, id string) map[string]string {
	t.Helper()
	w, err := c.Workflow(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, tk := range w.Tasks {
		if len(tk.Errors) > 0 {
			out[tk.TaskName] = tk.Errors[len(tk.Errors)-1].Error
		}
	}
	return out
}

// cascadesLeft counts the rows of jobfence_cascades.
func cascadesLeft(t *testing.T, db *pgtest.DB) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM jobfence_cascades`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// sagaTasks is charge -> ship -> refund (RunOnFailure), with below refund
// notify (a plain dependent), audit (RunAnyway) and undo (RunOnFailure),
// and x, a task of its own for a batch's other outcome.
func sagaTasks(q string) []queue.WorkflowTask {
	return []queue.WorkflowTask{
		task("charge", q), task("ship", q, "charge"), onFailure("refund", q, "ship"),
		task("notify", q, "refund"), anyway("audit", q, "refund"), onFailure("undo", q, "refund"),
		task("x", "x"),
	}
}

// chargedSaga inserts the saga of sagaTasks into queue q and completes its
// charge (with output, when given), so that ship is the next to run.
func chargedSaga(t *testing.T, c *pgqueue.Client, q string, output []byte) queue.WorkflowResult {
	t.Helper()
	res, err := c.InsertWorkflow(context.Background(), queue.WorkflowParams{Name: "saga", Tasks: sagaTasks(q)})
	if err != nil {
		t.Fatal(err)
	}
	charge := claimOne(t, c, q)
	finish(t, c, queue.Finish{Lease: charge.Lease(), Outcome: queue.OutcomeComplete, Output: output, Workflow: true})
	return res
}

// TestCompensationCancelledWhenNothingFailed: when ship completes, refund
// (RunOnFailure) is cancelled with the reason, and its dependents are
// treated as its cancel implies: notify cancelled, audit (RunAnyway) and
// undo (RunOnFailure: a cancelled dependency is a failed one) made
// ready; by each path a completion takes: a batch of completions (its
// release pipelined with its commit: the cascade runs after it), a mixed
// batch (the release in the client's transaction), a transactional
// handler's completion (FinishTx: the caller's transaction).
func TestCompensationCancelledWhenNothingFailed(t *testing.T) {
	for _, path := range []string{"completions", "mixed batch", "FinishTx"} {
		t.Run(path, func(t *testing.T) {
			c, db := newClient(t)
			ctx := context.Background()
			const q = "saga"
			res := chargedSaga(t, c, q, nil)
			if got := states(t, c, res.ID)["refund"]; got != queue.StatePending {
				t.Fatalf("refund is %s while ship waits, want pending", got)
			}
			ship := claimOne(t, c, q)
			done := queue.Finish{Lease: ship.Lease(), Outcome: queue.OutcomeComplete, Workflow: true}
			switch path {
			case "completions":
				finish(t, c, done)
			case "mixed batch":
				x := claimOne(t, c, "x")
				finish(t, c, done, queue.Finish{Lease: x.Lease(), Outcome: queue.OutcomeDiscard, Workflow: true,
					Error: &queue.AttemptError{Attempt: 1, Error: "x failed"}})
			case "FinishTx":
				completeTaskInTx(t, c, db, ship)
			}
			want := map[string]queue.State{"charge": "completed", "ship": "completed", "refund": "cancelled",
				"notify": "cancelled", "audit": "available", "undo": "available", "x": "available"}
			if path == "mixed batch" {
				want["x"] = "discarded"
			}
			if got := states(t, c, res.ID); !equalStates(got, want) {
				t.Fatalf("states = %v, want %v", got, want)
			}
			errs := lastErrors(t, c, res.ID)
			if errs["refund"] != noFailure {
				t.Fatalf("refund's reason = %q, want %q", errs["refund"], noFailure)
			}
			if want := `jobfence: dependency failed: task "refund" was cancelled; cancelled`; errs["notify"] != want {
				t.Fatalf("notify's reason = %q, want %q", errs["notify"], want)
			}
			if n := cascadesLeft(t, db); n != 0 {
				t.Fatalf("%d cascades left", n)
			}
			// refund never ran: a Retry would run it, once its
			// dependencies (all ended) let it.
			w, err := c.Workflow(ctx, res.ID)
			if err != nil {
				t.Fatal(err)
			}
			for _, tk := range w.Tasks {
				if tk.TaskName == "refund" && (tk.Attempt != 0 || tk.DepsLeft != 0 || !tk.RunOnFailure) {
					t.Fatalf("refund: attempt %d, %d dependencies left, RunOnFailure %v; want 0, 0, true", tk.Attempt, tk.DepsLeft, tk.RunOnFailure)
				}
			}
		})
	}
}

// TestCompensationRunsOnAFailure: a discard of ship (its last attempt
// failed) or a cancel (by request) makes refund ready, and refund reads
// charge's output, an ancestor's.
func TestCompensationRunsOnAFailure(t *testing.T) {
	for _, how := range []string{"discard", "cancel"} {
		t.Run(how, func(t *testing.T) {
			c, _ := newClient(t)
			ctx := context.Background()
			const q = "saga"
			res := chargedSaga(t, c, q, []byte(`"ch_1"`))
			if how == "discard" {
				ship := claimOne(t, c, q)
				finish(t, c, queue.Finish{Lease: ship.Lease(), Outcome: queue.OutcomeDiscard, Workflow: true,
					Error: &queue.AttemptError{Attempt: 1, Error: "no stock"}})
			} else if err := c.Cancel(ctx, res.Tasks["ship"]); err != nil {
				t.Fatal(err)
			}
			want := map[string]queue.State{"charge": "completed", "ship": queue.State(how + "ed"), "refund": "available",
				"notify": "pending", "audit": "pending", "undo": "pending", "x": "available"}
			if how == "cancel" {
				want["ship"] = "cancelled"
			}
			if got := states(t, c, res.ID); !equalStates(got, want) {
				t.Fatalf("states = %v, want %v", got, want)
			}
			refund := claimOne(t, c, q)
			if out, err := c.TaskOutput(ctx, refund.ID, "charge"); err != nil || string(out) != `"ch_1"` {
				t.Fatalf("refund reads charge's output = %s, %v", out, err)
			}
			finish(t, c, queue.Finish{Lease: refund.Lease(), Outcome: queue.OutcomeComplete, Workflow: true})
			want["refund"], want["notify"], want["audit"], want["undo"] = "completed", "available", "available", "cancelled"
			if got := states(t, c, res.ID); !equalStates(got, want) {
				t.Fatalf("states after refund completed = %v, want %v", got, want)
			}
		})
	}
}

// TestCompensationReleasedOnceAfterRetry: refund depends on ship and
// pack. ship's discard leaves it pending (pack runs) with the failure
// recorded; ship retried and completed does not count again, so refund
// stays pending until pack completes, and then runs (a dependency
// failed), once.
func TestCompensationReleasedOnceAfterRetry(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	const q = "saga"
	res, err := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: "saga", Tasks: []queue.WorkflowTask{
		task("ship", q), task("pack", "pack"), onFailure("refund", q, "ship", "pack"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	ship := claimOne(t, c, q)
	finish(t, c, queue.Finish{Lease: ship.Lease(), Outcome: queue.OutcomeDiscard, Workflow: true,
		Error: &queue.AttemptError{Attempt: 1, Error: "no stock"}})
	if err := c.Retry(ctx, ship.ID); err != nil {
		t.Fatal(err)
	}
	ship = claimOne(t, c, q)
	finish(t, c, queue.Finish{Lease: ship.Lease(), Outcome: queue.OutcomeComplete, Workflow: true})
	if got := states(t, c, res.ID)["refund"]; got != queue.StatePending {
		t.Fatalf("refund is %s after ship's second end, while pack waits; want pending (ship counted once)", got)
	}
	pack := claimOne(t, c, "pack")
	finish(t, c, queue.Finish{Lease: pack.Lease(), Outcome: queue.OutcomeComplete, Workflow: true})
	if got := states(t, c, res.ID)["refund"]; got != queue.StateAvailable {
		t.Fatalf("refund is %s once pack completed, want available: ship had failed", got)
	}
	if refund := claimOne(t, c, q); refund.TaskName != "refund" {
		t.Fatalf("claimed %q, want refund", refund.TaskName)
	}
}

// TestCompensationsOfAFanOutInRanges: root's completion releases its
// rangeWidth RunOnFailure dependents in ranges of rangeChunk (the first
// in the completion, the rest after its commit): each is cancelled, and
// through the cascades, sum (a plain fan-in) is cancelled and sweep
// (RunAnyway on all) made available once. When root is discarded, they
// all become ready instead.
func TestCompensationsOfAFanOutInRanges(t *testing.T) {
	for _, outcome := range []queue.Outcome{queue.OutcomeComplete, queue.OutcomeDiscard} {
		t.Run(map[queue.Outcome]string{queue.OutcomeComplete: "completed", queue.OutcomeDiscard: "discarded"}[outcome], func(t *testing.T) {
			c, db := newRangeClient(t)
			ctx := context.Background()
			p := queue.WorkflowParams{Name: "ranges", Tasks: []queue.WorkflowTask{task("root", "root")}}
			names := make([]string, rangeWidth)
			for i := range names {
				names[i] = fmt.Sprintf("task-%02d", i)
				p.Tasks = append(p.Tasks, onFailure(names[i], "fan", "root"))
			}
			p.Tasks = append(p.Tasks, task("sum", "sum", names...), anyway("sweep", "sum", names...))
			res, err := c.InsertWorkflow(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			root := claimOne(t, c, "root")
			finish(t, c, queue.Finish{Lease: root.Lease(), Outcome: outcome, Workflow: true, Error: &queue.AttemptError{Attempt: 1, Error: "root"}})
			if err := c.WaitReleases(ctx); err != nil {
				t.Fatal(err)
			}
			if outcome == queue.OutcomeDiscard {
				if got := fanStates(t, db, res.ID); got["available/0"] != rangeWidth {
					t.Fatalf("fan = %v, want %d available", got, rangeWidth)
				}
				return
			}
			if got := fanStates(t, db, res.ID); got["cancelled/0"] != rangeWidth {
				t.Fatalf("fan = %v, want %d cancelled with no dependency left", got, rangeWidth)
			}
			got := states(t, c, res.ID)
			if got["sum"] != queue.StateCancelled || got["sweep"] != queue.StateAvailable {
				t.Fatalf("sum is %s and sweep %s, want cancelled and available", got["sum"], got["sweep"])
			}
			var left int
			if err := db.Pool.QueryRow(ctx, `SELECT deps_left FROM jobfence_jobs WHERE id = $1`, res.Tasks["sweep"]).Scan(&left); err != nil || left != 0 {
				t.Fatalf("sweep has %d dependencies left (%v), want 0", left, err)
			}
			if n := cascadesLeft(t, db); n != 0 {
				t.Fatalf("%d cascades left", n)
			}
		})
	}
}

// TestCompensationsLeftToMaintenance: the cascades a client did not run
// after its commit (it stopped first) are run by a worker's maintenance
// (ReleaseDependents(nil)).
func TestCompensationsLeftToMaintenance(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	const q = "saga"
	res := chargedSaga(t, c, q, nil)
	ship := claimOne(t, c, q)
	// As a client that stopped after the commit: ship completed and its
	// release run (refund cancelled, its cascade recorded), and nothing
	// after the commit.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `UPDATE jobfence_jobs SET state = 'completed', finalized_at = now() WHERE id = $1`, ship.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, pgqueue.ReleaseSQL, []int64{ship.ID}, pgqueue.DefaultReleaseChunk, ""); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := states(t, c, res.ID); got["refund"] != "cancelled" || got["notify"] != "pending" || cascadesLeft(t, db) != 1 {
		t.Fatalf("states = %v with %d cascades, want refund cancelled, notify pending, 1 cascade", got, cascadesLeft(t, db))
	}
	if _, err := c.ReleaseDependents(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := states(t, c, res.ID); got["notify"] != "cancelled" || got["audit"] != "available" || got["undo"] != "available" {
		t.Fatalf("states after maintenance = %v", got)
	}
	if n := cascadesLeft(t, db); n != 0 {
		t.Fatalf("%d cascades left", n)
	}
}

// TestCompensationAppended: a RunOnFailure task appended to a running
// task is released by the promoter's sweep of its edge: cancelled, with
// its own dependent, when the task completes; made ready when it fails.
// One appended to a task that has ended is decided at insert.
func TestCompensationAppended(t *testing.T) {
	for _, outcome := range []queue.Outcome{queue.OutcomeComplete, queue.OutcomeDiscard} {
		t.Run(map[queue.Outcome]string{queue.OutcomeComplete: "completed", queue.OutcomeDiscard: "discarded"}[outcome], func(t *testing.T) {
			c, db := newClient(t)
			ctx := context.Background()
			const q = "app"
			res, err := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: "app", Tasks: []queue.WorkflowTask{task("a", q), task("b", "b")}})
			if err != nil {
				t.Fatal(err)
			}
			a := claimOne(t, c, q)
			if _, err := c.InsertWorkflow(ctx, queue.WorkflowParams{ID: res.ID, Tasks: []queue.WorkflowTask{
				onFailure("comp", q, "a"), task("after", q, "comp"),
			}}); err != nil {
				t.Fatal(err)
			}
			finish(t, c, queue.Finish{Lease: a.Lease(), Outcome: outcome, Workflow: true, Error: &queue.AttemptError{Attempt: 1, Error: "a"}})
			if got := states(t, c, res.ID); got["comp"] != queue.StatePending {
				t.Fatalf("comp is %s before the promoter's sweep, want pending", got["comp"])
			}
			if _, err := c.Promote(ctx, 100); err != nil {
				t.Fatal(err)
			}
			got := states(t, c, res.ID)
			wantComp, wantAfter := queue.StateCancelled, queue.StateCancelled
			if outcome == queue.OutcomeDiscard {
				wantComp, wantAfter = queue.StateAvailable, queue.StatePending
			}
			if got["comp"] != wantComp || got["after"] != wantAfter {
				t.Fatalf("comp is %s and after %s, want %s and %s", got["comp"], got["after"], wantComp, wantAfter)
			}
			if outcome == queue.OutcomeComplete && lastErrors(t, c, res.ID)["comp"] != noFailure {
				t.Fatalf("comp's reason = %q", lastErrors(t, c, res.ID)["comp"])
			}
			if n := cascadesLeft(t, db); n != 0 {
				t.Fatalf("%d cascades left", n)
			}
			// Appended once a has ended: decided at insert.
			if _, err := c.InsertWorkflow(ctx, queue.WorkflowParams{ID: res.ID, Tasks: []queue.WorkflowTask{
				onFailure("late", q, "a"), task("later", q, "late"),
			}}); err != nil {
				t.Fatal(err)
			}
			got = states(t, c, res.ID)
			wantLate, wantLater := queue.StateCancelled, queue.StateCancelled
			if outcome == queue.OutcomeDiscard {
				wantLate, wantLater = queue.StateAvailable, queue.StatePending
			}
			if got["late"] != wantLate || got["later"] != wantLater {
				t.Fatalf("late is %s and later %s, want %s and %s", got["late"], got["later"], wantLate, wantLater)
			}
			errs := lastErrors(t, c, res.ID)
			if outcome == queue.OutcomeComplete && (errs["late"] != noFailure || !strings.Contains(errs["later"], `task "late" was cancelled`)) {
				t.Fatalf("reasons: late %q, later %q", errs["late"], errs["later"])
			}
		})
	}
}

// TestCompensationAndRetryWorkflow: RetryWorkflow leaves a compensation
// whose dependencies all completed cancelled; one it resets (refund,
// discarded after ship's failure) waits for ship again, its failure
// forgotten, and is cancelled when ship completes this time.
func TestCompensationAndRetryWorkflow(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	const q = "saga"
	res, err := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: "saga", Tasks: []queue.WorkflowTask{
		task("charge", q), task("ship", q, "charge"), onFailure("refund", q, "ship"), onFailure("void", q, "charge"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	charge := claimOne(t, c, q)
	finish(t, c, queue.Finish{Lease: charge.Lease(), Outcome: queue.OutcomeComplete, Workflow: true})
	ship := claimOne(t, c, q)
	finish(t, c, queue.Finish{Lease: ship.Lease(), Outcome: queue.OutcomeDiscard, Workflow: true,
		Error: &queue.AttemptError{Attempt: 1, Error: "no stock"}})
	refund := claimOne(t, c, q)
	finish(t, c, queue.Finish{Lease: refund.Lease(), Outcome: queue.OutcomeDiscard, Workflow: true,
		Error: &queue.AttemptError{Attempt: 1, Error: "refund refused"}})
	want := map[string]queue.State{"charge": "completed", "ship": "discarded", "refund": "discarded", "void": "cancelled"}
	if got := states(t, c, res.ID); !equalStates(got, want) {
		t.Fatalf("states = %v, want %v", got, want)
	}
	n, err := c.RetryWorkflow(ctx, res.ID)
	if err != nil || n != 2 {
		t.Fatalf("RetryWorkflow = %d, %v; want ship and refund reset", n, err)
	}
	want = map[string]queue.State{"charge": "completed", "ship": "available", "refund": "pending", "void": "cancelled"}
	if got := states(t, c, res.ID); !equalStates(got, want) {
		t.Fatalf("states after RetryWorkflow = %v, want %v", got, want)
	}
	ship = claimOne(t, c, q)
	finish(t, c, queue.Finish{Lease: ship.Lease(), Outcome: queue.OutcomeComplete, Workflow: true})
	if got := states(t, c, res.ID)["refund"]; got != queue.StateCancelled {
		t.Fatalf("refund is %s once ship completed on its retry, want cancelled (the failure it saw was retried)", got)
	}
	if errs := lastErrors(t, c, res.ID); errs["refund"] != noFailure {
		t.Fatalf("refund's reason = %q", errs["refund"])
	}
}
