package pgqueue_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/queue"
)

// fleetBound is how long a worker's or the maintenance's statement may
// take while a caller's transaction is left open: far more than any of
// them takes on its own, far less than forever.
const fleetBound = 5 * time.Second

// TestAppendInAnOpenTransactionHoldsNoWorker (issue 49, case 4): a
// caller's transaction that appended tasks to a running workflow and was
// left open (a paused caller) holds nothing the fleet waits for. While it
// is open, the worker running the dependency extends its leases (the
// dependency's and an unrelated job's, in one heartbeat), completes them,
// and the rescue, the grant and the promoter run; each within a bound.
// The appended task is released once, after both its dependencies ended,
// whether the dependency it was appended to ended before the caller's
// commit or after it; after a rollback nothing was appended. Before the
// fix the append updated the running dependency's row and held it until
// its commit, and the heartbeat waited for it.
func TestAppendInAnOpenTransactionHoldsNoWorker(t *testing.T) {
	for _, order := range []string{"dependency ends before the commit", "dependency ends after the commit", "caller rolls back"} {
		t.Run(order, func(t *testing.T) {
			c, db := newClient(t)
			ctx := context.Background()
			const q = "open-append"
			res, err := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: "open", Tasks: []queue.WorkflowTask{task("a", q), task("b", q)}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Enqueue(ctx, queue.EnqueueParams{Queue: q, Kind: "other", Args: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
			running := claim(t, c, q, 10, time.Minute)
			if len(running) != 3 {
				t.Fatalf("claimed %d jobs, want a, b and the unrelated one", len(running))
			}
			byName := map[string]*queue.Job{}
			for _, j := range running {
				byName[j.TaskName] = j
			}
			a, b, other := byName["a"], byName["b"], byName[""]

			// The paused caller: it appends "after" (depending on a and b),
			// and its transaction stays open.
			tx, err := db.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := c.InsertWorkflowTx(ctx, tx, queue.WorkflowParams{ID: res.ID, Tasks: []queue.WorkflowTask{task("after", q, "a", "b")}}); err != nil {
				t.Fatal(err)
			}

			bounded(t, "the heartbeat of a, b and the unrelated job", func(ctx context.Context) error {
				lost, err := c.Heartbeat(ctx, []queue.Lease{other.Lease(), a.Lease(), b.Lease()}, time.Hour)
				if err == nil && len(lost) > 0 {
					t.Errorf("the heartbeat lost %v", lost)
				}
				return err
			})
			var extended int
			if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE id = ANY($1) AND lease_expires_at > now() + interval '30 minutes'`,
				[]int64{a.ID, b.ID, other.ID}).Scan(&extended); err != nil {
				t.Fatal(err)
			}
			if extended != 3 {
				t.Fatalf("%d of the 3 leases were extended while the caller's transaction was open", extended)
			}
			maintain := func() {
				bounded(t, "the rescue", func(ctx context.Context) error {
					_, err := c.Rescue(ctx, queue.RescueParams{Limit: 100})
					return err
				})
				bounded(t, "the grant", func(ctx context.Context) error { _, err := c.GrantWaiting(ctx, 100); return err })
				bounded(t, "the promoter", func(ctx context.Context) error { _, err := c.Promote(ctx, 100); return err })
			}
			complete := func(j *queue.Job) {
				bounded(t, "the completion of "+j.TaskName, func(ctx context.Context) error {
					stale, err := c.Finish(ctx, []queue.Finish{{Lease: j.Lease(), Outcome: queue.OutcomeComplete, Workflow: j.WorkflowID != ""}})
					if err == nil && len(stale) > 0 {
						t.Errorf("the completion of %q was refused as stale", j.TaskName)
					}
					return err
				})
			}
			complete(other)
			maintain()
			if order != "dependency ends after the commit" {
				complete(a)
				maintain()
			}
			if order == "caller rolls back" {
				if err := tx.Rollback(ctx); err != nil {
					t.Fatal(err)
				}
			} else if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			// Twice each: a second pass must release nothing again.
			maintain()
			maintain()
			if order == "dependency ends after the commit" {
				complete(a)
				maintain()
				maintain()
			}
			if order == "caller rolls back" {
				if got := states(t, c, res.ID); len(got) != 2 {
					t.Fatalf("states after the rollback = %v, want a and b only", got)
				}
				assertNoEdges(t, db.Pool)
				return
			}
			if got := states(t, c, res.ID)["after"]; got != queue.StatePending {
				t.Fatalf("after is %s once a ended, while b runs; want pending", got)
			}
			complete(b)
			maintain()
			maintain()
			w, err := c.Workflow(ctx, res.ID)
			if err != nil {
				t.Fatal(err)
			}
			var after int64
			for _, tk := range w.Tasks {
				if tk.TaskName == "after" {
					after = tk.ID
					if tk.State != queue.StateAvailable || tk.DepsLeft != 0 {
						t.Fatalf("after is %s with %d dependencies left once a and b completed; want available with none", tk.State, tk.DepsLeft)
					}
				}
			}
			if got := claimOne(t, c, q); got.TaskName != "after" {
				t.Fatalf("claimed %q, want after", got.TaskName)
			}
			if more := claim(t, c, q, 10, time.Minute); len(more) != 0 {
				t.Fatalf("claimed %d more jobs, want none", len(more))
			}
			assertNoEdges(t, db.Pool)
			// a's row lists after once its edge was taken: the pruner's
			// keep rule reads it.
			var listed bool
			if err := db.Pool.QueryRow(ctx, `SELECT $2::bigint = ANY(dependents) FROM jobfence_jobs WHERE id = $1`, a.ID, after).Scan(&listed); err != nil || !listed {
				t.Fatalf("a lists after among its dependents: %v, %v", listed, err)
			}
		})
	}
}

// bounded runs what within fleetBound, failing the test if it does not
// return by then or returns an error.
func bounded(t *testing.T, what string, fn func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), fleetBound)
	defer cancel()
	if err := fn(ctx); err != nil {
		t.Fatalf("%s, with a caller's transaction open: %v", what, err)
	}
}

// assertNoEdges fails when an appended task's edge is left over.
func assertNoEdges(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM jobfence_task_edges`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d edges of appended tasks are left", n)
	}
}
