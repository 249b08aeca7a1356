package workflow_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/internal/freeze"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testchild"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
	"github.com/jobfence/jobfence/workflow"
)

// zombieChildEnv makes the test binary play the worker that freezes.
const zombieChildEnv = "JOBFENCE_WORKFLOW_ZOMBIE_CHILD"

// TestZombieTaskReleasesNothing: the worker running the order
// workflow's charge, in a process of its own, records its output and
// freezes (SIGSTOP) before its completion, past its lease. The rescue
// gives charge to another worker, whose completion is accepted and
// releases reserve and receipt, then ship. When the frozen worker wakes,
// its completion is stale: it neither overwrites charge's output nor
// releases the dependents again. Each dependent ran once, after charge's
// accepted completion, and read that attempt's output.
func TestZombieTaskReleasesNothing(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, effectsTable); err != nil {
		t.Fatal(err)
	}
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quiet()})
	res, err := workflow.Insert(ctx, c, orderWorkflow("o-zombie"))
	if err != nil {
		t.Fatal(err)
	}
	child := testchild.Start(t, zombieChildEnv, "DATABASE_URL="+db.URL)
	var zombieFence int64
	if _, err := fmt.Sscanf(child.Next(t), "FROZEN %d", &zombieFence); err != nil {
		t.Fatalf("child: %v (stderr %s)", err, child.Stderr())
	}
	reg := worker.NewRegistry()
	addOrderHandlers(reg, "rescuer", nil)
	start(t, pgqueue.New(db.NewPool(t, 8), pgqueue.Config{Logger: quiet()}), reg, workerConfig(2*time.Second))
	w := waitDone(t, c, res.ID)
	child.Signal(t, syscall.SIGCONT)
	if stats, err := child.Next(t), child.Wait(); stats != "STATS completed=0 stale=1" || err != nil {
		t.Fatalf("the frozen worker reports %q and exits with %v, want its completion stale", stats, err)
	}
	// What the workflow looks like now that the zombie has reported.
	if w, err = c.Workflow(ctx, res.ID); err != nil {
		t.Fatal(err)
	}
	tasks := map[string]*pgqueue.Task{}
	for _, tk := range w.Tasks {
		tasks[tk.TaskName] = tk
	}
	charge := tasks["charge"]
	accepted := fmt.Sprintf(`{"charge_id": "rescuer-%d"}`, charge.Fence)
	if charge.State != queue.StateCompleted || charge.Fence == zombieFence || string(charge.Output) != accepted {
		t.Fatalf("charge: %s, fence %d (zombie's %d), output %s; want completed by the rescuer with its output %s",
			charge.State, charge.Fence, zombieFence, charge.Output, accepted)
	}
	effects, err := effectsOf(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("rescuer-%d", charge.Fence)
	for task, seen := range map[string]string{"reserve": id, "receipt": id, "ship": "reserve saw " + id + " / receipt saw " + id} {
		if got := effects[task]; len(got) != 1 || got[0] != seen {
			t.Fatalf("%s ran %d times and saw %q, want once %q", task, len(got), got, seen)
		}
		tk := tasks[task]
		if tk.State != queue.StateCompleted || tk.Attempt != 1 || !tk.AttemptedAt.After(charge.FinalizedAt) && task != "ship" {
			t.Fatalf("%s: %s after %d attempts, claimed at %s; want completed in one attempt claimed after charge's completion at %s",
				task, tk.State, tk.Attempt, tk.AttemptedAt, charge.FinalizedAt)
		}
	}
	if ship, deps := tasks["ship"], []*pgqueue.Task{tasks["reserve"], tasks["receipt"]}; ship.AttemptedAt.Before(deps[0].FinalizedAt) || ship.AttemptedAt.Before(deps[1].FinalizedAt) {
		t.Fatalf("ship was claimed at %s, before its dependencies ended (%s, %s)", ship.AttemptedAt, deps[0].FinalizedAt, deps[1].FinalizedAt)
	}
	for _, tk := range w.Tasks {
		if strings.Contains(string(tk.Output), "zombie") {
			t.Fatalf("%s's output %s is the zombie's", tk.TaskName, tk.Output)
		}
	}
}

// zombieChild is the frozen worker of TestZombieTaskReleasesNothing, run
// in a child process (see TestMain): it freezes in charge's handler,
// after recording its output, and when continued reports what became of
// its completion.
func zombieChild() int {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pool.Close()
	reg := worker.NewRegistry()
	addOrderHandlers(reg, "zombie", func(fence int64) {
		fmt.Printf("FROZEN %d\n", fence)
		freeze.Self()
	})
	cfg := workerConfig(2 * time.Second)
	cfg.DisableMaintenance, cfg.Logger = true, quiet()
	w, err := worker.New(pgqueue.New(pool, pgqueue.Config{Logger: quiet()}), reg, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := w.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	deadline := time.Now().Add(time.Minute)
	for w.Stats().Completed+w.Stats().Stale == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	w.Stop(stopCtx)
	fmt.Printf("STATS completed=%d stale=%d\n", w.Stats().Completed, w.Stats().Stale)
	return 0
}
