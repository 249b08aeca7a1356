package pgqueue_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// TestAppendDuringCascadeIsCancelled: tasks appended to a workflow
// (workflow.Append) while a cancel cascades through the task they depend
// on are cancelled too, not left pending. The append's transaction holds
// the task it depends on while the cascade waits for it, then commits:
// the cascade, whose statement began before that commit, must still
// reach the new tasks.
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
			tx, err := db.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			var pid int
			if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
				t.Fatal(err)
			}
			if _, err := c.InsertWorkflowTx(ctx, tx, queue.WorkflowParams{ID: res.ID, Tasks: []queue.WorkflowTask{
				task("t", "race", "p"), task("u", "race", "t"),
			}}); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				if via == "cancel" {
					done <- c.Cancel(ctx, res.Tasks["d"])
					return
				}
				_, err := c.CancelWorkflow(ctx, res.ID)
				done <- err
			}()
			// The cancel waits for the row the append holds.
			deadline := time.Now().Add(time.Minute)
			for {
				var waiting int
				if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, pid).Scan(&waiting); err != nil {
					t.Fatal(err)
				}
				if waiting > 0 {
					break
				}
				select {
				case err := <-done:
					t.Fatalf("the cancel ended (%v) without waiting for the append's transaction", err)
				default:
				}
				if time.Now().After(deadline) {
					t.Fatal("the cancel did not wait for the append's transaction within a minute")
				}
				time.Sleep(5 * time.Millisecond)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
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
// succeeds and its tasks end cancelled, never pending.
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
		got := states(t, c, res.ID)
		for _, n := range []string{"p", "t", "u"} {
			if got[n] != queue.StateCancelled {
				t.Fatalf("round %d: states = %v, want p, t and u cancelled", i, got)
			}
		}
	}
}
