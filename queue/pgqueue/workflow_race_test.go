package pgqueue_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestAppendDuringCascadeIsCancelled: tasks appended to a workflow
// (workflow.Append) while a cancel cascades through the task they depend
// on are cancelled too, not left pending. The append's transaction, left
// open, holds nothing the cancel waits for (it writes no existing task's
// row): the cancel ends first, and once the append commits, the
// promoter's sweep finds the new task's dependency cancelled and cancels
// it, and its dependent with it.
func TestAppendDuringCascadeIsCancelled(t *testing.T) {
	for _, via := range []string{"cancel", "cancel workflow"} {
		t.Run(via, func(t *testing.T) {
			c, db := newClient(t)
			ctx := context.Background()
			res, err := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: "race", Tasks: []queue.WorkflowTask{
				task("d", "race"), task("p", "race", "d"),
			}})
			if err != nil {
				t.Fatal(err)
			}
			tx, _ := appendOpen(t, c, db, res.ID, task("t", "race", "p"), task("u", "race", "t"))
			bounded(t, "the "+via, func(ctx context.Context) error {
				if via == "cancel" {
					return c.Cancel(ctx, res.Tasks["d"])
				}
				_, err := c.CancelWorkflow(ctx, res.ID)
				return err
			})
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Promote(ctx, 100); err != nil {
				t.Fatal(err)
			}
			got := states(t, c, res.ID)
			for _, n := range []string{"p", "t", "u"} {
				if got[n] != queue.StateCancelled {
					t.Fatalf("states = %v, want p, t and u cancelled", got)
				}
			}
		})
	}
}

// TestAppendRacingCascade: an append and a cancel that cascades through
// the task the appended ones depend on, started together from two
// goroutines, many times over: whichever goes first, the append
// succeeds and its tasks end cancelled, never pending (at the latest
// after a pass of the promoter).
func TestAppendRacingCascade(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	for i := range 30 {
		res, err := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: "race", Tasks: []queue.WorkflowTask{
			task("d", "race"), task("p", "race", "d"),
		}})
		if err != nil {
			t.Fatal(err)
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		var cancelErr, appendErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			if i%2 == 0 {
				cancelErr = c.Cancel(ctx, res.Tasks["d"])
			} else {
				_, cancelErr = c.CancelWorkflow(ctx, res.ID)
			}
		}()
		go func() {
			defer wg.Done()
			<-start
			_, appendErr = c.InsertWorkflow(ctx, queue.WorkflowParams{ID: res.ID, Tasks: []queue.WorkflowTask{
				task("t", "race", "p"), task("u", "race", "t"),
			}})
		}()
		close(start)
		wg.Wait()
		if cancelErr != nil || appendErr != nil {
			t.Fatalf("round %d: cancel: %v; append: %v", i, cancelErr, appendErr)
		}
		if _, err := c.Promote(ctx, 100); err != nil {
			t.Fatal(err)
		}
		got := states(t, c, res.ID)
		for _, n := range []string{"p", "t", "u"} {
			if got[n] != queue.StateCancelled {
				t.Fatalf("round %d: states = %v, want p, t and u cancelled", i, got)
			}
		}
	}
}

// TestAppendsOfOneNameRace: two appends that give a task the same new
// name, the first in a transaction still open when the second starts:
// the second waits for the first's commit, then fails with
// queue.ErrInvalidWorkflow and a message that says why, having written
// nothing; the workflow has one task of that name.
func TestAppendsOfOneNameRace(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	res, err := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: "names", Tasks: []queue.WorkflowTask{task("a", "names")}})
	if err != nil {
		t.Fatal(err)
	}
	tx, pid := appendOpen(t, c, db, res.ID, task("b", "names", "a"))
	done := make(chan error, 1)
	go func() {
		_, err := c.InsertWorkflow(ctx, queue.WorkflowParams{ID: res.ID, Tasks: []queue.WorkflowTask{
			task("c", "names"), task("b", "names", "c"),
		}})
		done <- err
	}()
	waitBlockedBy(t, db, pid, done, "the second append")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	err = <-done
	if want := "another insert has just given one of these names to a task of the workflow"; !errors.Is(err, queue.ErrInvalidWorkflow) || !strings.Contains(err.Error(), want) {
		t.Fatalf("second append = %v, want ErrInvalidWorkflow containing %q", err, want)
	}
	got := states(t, c, res.ID)
	if len(got) != 2 || got["c"] != "" {
		t.Fatalf("tasks = %v, want a and the first append's b only", got)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE workflow_id = $1`, res.ID).Scan(&n); err != nil || n != 2 {
		t.Fatalf("the workflow has %d task rows (%v), want 2", n, err)
	}
}

// appendOpen appends tasks to workflow id in a transaction it leaves open
// (rolled back at the test's end), and returns it with its backend's pid.
func appendOpen(t *testing.T, c *pgqueue.Client, db *pgtest.DB, id string, tasks ...queue.WorkflowTask) (pgx.Tx, int) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(ctx) })
	var pid int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := c.InsertWorkflowTx(ctx, tx, queue.WorkflowParams{ID: id, Tasks: tasks}); err != nil {
		t.Fatal(err)
	}
	return tx, pid
}

// waitBlockedBy returns once a session waits for backend pid, failing if
// what (whose end done reports) ends first or none waits within a minute.
func waitBlockedBy(t *testing.T, db *pgtest.DB, pid int, done <-chan error, what string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var waiting int
		if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, pid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("%s ended (%v) without waiting for the append's transaction", what, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not wait for the append's transaction within a minute", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
