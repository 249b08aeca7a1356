package worker_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// TestLeftDependentsReleasedByMaintenance: the dependents that a client
// left to release after a fan-out's completion (it completed the root in
// a transaction and stopped before releasing past the first chunk) are
// released by a worker's rescue pass, once, and counted.
func TestLeftDependentsReleasedByMaintenance(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	const chunk, width = 10, 15 // one range of 5 past the 10 the completion releases
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger(), ReleaseChunk: chunk})
	res := insertFan(t, c, "k", width)
	root, err := c.Claim(ctx, queue.ClaimParams{Queue: "root", Limit: 1, Lease: time.Minute, WorkerID: "stopped"})
	if err != nil || len(root) != 1 {
		t.Fatalf("claim the root: %v %v", root, err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.FinishTx(ctx, tx, queue.Finish{Lease: root[0].Lease(), Outcome: queue.OutcomeComplete, Workflow: true}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	available := func() int {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE workflow_id = $1 AND queue = 'fan' AND state = 'available'`, res.ID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := available(); n != chunk {
		t.Fatalf("%d dependents available after the completion, want the first %d", n, chunk)
	}
	// The worker works another queue: only its maintenance touches the fan.
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[effectArgs]) error { return nil })
	w := startWorker(t, pgqueue.New(db.NewPool(t, 4), pgqueue.Config{Logger: quietLogger()}), reg,
		worker.Config{Queues: map[string]int{"other": 1}, RescueInterval: 100 * time.Millisecond})
	testwatch.WaitFor(t, 30*time.Second, "the worker's maintenance to release the range left", func() bool {
		return w.Stats().ReleasedRanges > 0
	})
	if n, s := available(), w.Stats(); n != width || s.ReleasedRanges != 1 {
		t.Fatalf("%d dependents available, %d ranges released by the worker; want %d and 1", n, s.ReleasedRanges, width)
	}
}

// TestStopWaitsForTheReleasesItStarted: the dependents that a worker's
// completion of a fan-out's root left to release after the commit (past
// the first chunk) are released before its Stop returns, so that a pool
// closed next cuts none short. A row lock held on a dependent keeps the
// range's release waiting while Stop is called.
func TestStopWaitsForTheReleasesItStarted(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	const chunk, width = 10, 15 // one range of 5 past the 10 the completion releases
	c := pgqueue.New(db.NewPool(t, 8), pgqueue.Config{Logger: quietLogger(), ReleaseChunk: chunk})
	res := insertFan(t, c, "effect", width)
	// The range holds the last dependents; lock the last of them.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT FROM jobfence_jobs WHERE id = (SELECT max(id) FROM jobfence_jobs WHERE workflow_id = $1) FOR UPDATE`, res.ID); err != nil {
		t.Fatal(err)
	}
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[effectArgs]) error { return nil })
	w := startWorker(t, c, reg, worker.Config{Queues: map[string]int{"root": 1}})
	testwatch.WaitFor(t, 30*time.Second, "the root to complete", func() bool {
		var state string
		err := db.Pool.QueryRow(ctx, `SELECT state FROM jobfence_jobs WHERE workflow_id = $1 AND task_name = 'root'`, res.ID).Scan(&state)
		return err == nil && state == string(queue.StateCompleted)
	})
	stopped := make(chan error, 1)
	go func() {
		stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		stopped <- w.Stop(stopCtx)
	}()
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) while a range of the root's dependents was still being released", err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	left, err := c.ReleasesLeft(ctx, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	var available int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE workflow_id = $1 AND queue = 'fan' AND state = 'available'`, res.ID).Scan(&available); err != nil {
		t.Fatal(err)
	}
	if left != 0 || available != width {
		t.Fatalf("after Stop: %d ranges left, %d of %d dependents available; want none left, all available", left, available, width)
	}
}

// insertFan inserts a workflow "fan" of a task "root" (queue "root") that
// width tasks (queue "fan") depend on, every task of kind kind.
func insertFan(t *testing.T, c *pgqueue.Client, kind string, width int) queue.WorkflowResult {
	t.Helper()
	res, err := c.InsertWorkflow(context.Background(), fanOut(kind, "root", "fan", width, false))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// fanOut is a workflow of a task "root" of queue rootQ, width tasks of
// queue fanQ that depend on it, and, with sum, a task "sum" of rootQ that
// depends on all of them, every one of kind kind ("" queues: the default).
func fanOut(kind, rootQ, fanQ string, width int, sum bool) queue.WorkflowParams {
	params := func(q string) queue.EnqueueParams {
		return queue.EnqueueParams{Kind: kind, Queue: q, Args: []byte(`{}`)}
	}
	p := queue.WorkflowParams{Name: "fan", Tasks: []queue.WorkflowTask{{Name: "root", Params: params(rootQ)}}}
	names := make([]string, width)
	for i := range names {
		names[i] = fmt.Sprintf("task-%d", i)
		p.Tasks = append(p.Tasks, queue.WorkflowTask{Name: names[i], DependsOn: []string{"root"}, Params: params(fanQ)})
	}
	if sum {
		p.Tasks = append(p.Tasks, queue.WorkflowTask{Name: "sum", DependsOn: names, Params: params(rootQ)})
	}
	return p
}

// finishClaims returns hooks that count the jobs that outcomes claimed
// (ClaimInfo.Finish), and the count.
func finishClaims() (worker.Hooks, *atomic.Int64) {
	var n atomic.Int64
	return worker.Hooks{Claim: func(ctx context.Context, ci worker.ClaimInfo) {
		if ci.Finish {
			n.Add(int64(ci.Jobs))
		}
	}}, &n
}

// TestFanOutRunsInTheSlotsItsRootFreed: a worker that completes a
// fan-out's root claims the dependents its release makes ready into its
// free slots (the release's own and its ranges'), which the Claim hook
// reports as claimed by outcomes; every task runs once, and so does the
// fan-in, after all of them.
func TestFanOutRunsInTheSlotsItsRootFreed(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	const chunk, width = 20, 300
	c := pgqueue.New(db.NewPool(t, 8), pgqueue.Config{Logger: quietLogger(), ReleaseChunk: chunk})
	p := fanOut("effect", "", "", width, true)
	res, err := c.InsertWorkflow(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	runs := map[int64]int{}
	var sumRanAfter int
	sum := res.Tasks["sum"]
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[effectArgs]) error {
		mu.Lock()
		defer mu.Unlock()
		runs[job.ID]++
		if job.ID == sum {
			sumRanAfter = len(runs) - 1
		}
		return nil
	})
	hooks, byOutcomes := finishClaims()
	w := startWorker(t, c, reg, worker.Config{Queues: map[string]int{"default": 50}, Hooks: hooks})
	testwatch.WaitFor(t, time.Minute, "the workflow to complete", func() bool {
		return w.Stats().Completed == width+2
	})
	mu.Lock()
	defer mu.Unlock()
	for id, n := range runs {
		if n != 1 {
			t.Fatalf("task %d ran %d times", id, n)
		}
	}
	if len(runs) != width+2 || sumRanAfter != width+1 {
		t.Fatalf("%d tasks ran, the fan-in after %d; want %d, after %d", len(runs), sumRanAfter, width+2, width+1)
	}
	if n := byOutcomes.Load(); n == 0 {
		t.Fatalf("no dependent was claimed by its release; stats %+v", w.Stats())
	}
	t.Logf("%d of %d tasks claimed by the releases of their dependencies", byOutcomes.Load(), width+1)
}

// TestFanOutLeftToTheFleet: a worker with little room that completes a
// fan-out's root runs some of its tasks, but does not keep the rest from
// another worker with room: past the window in which its ranges claim
// for it (a second), they are released for any claim.
func TestFanOutLeftToTheFleet(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	const chunk, width = 10, 200
	p := fanOut("effect", "", "", width, false)
	var mu sync.Mutex
	ran := map[string]int{}
	// The root runs on the small worker and ends only once the large one
	// has started, however long its start takes.
	rootRunning, largeStarted := make(chan struct{}), make(chan struct{})
	registry := func(name string) *worker.Registry {
		reg := worker.NewRegistry()
		worker.Add(reg, func(ctx context.Context, job *worker.Job[effectArgs]) error {
			if job.TaskName == "root" {
				close(rootRunning)
				<-largeStarted
			}
			time.Sleep(50 * time.Millisecond)
			mu.Lock()
			ran[name]++
			mu.Unlock()
			return nil
		})
		return reg
	}
	small := pgqueue.New(db.NewPool(t, 8), pgqueue.Config{Logger: quietLogger(), ReleaseChunk: chunk})
	a := startWorker(t, small, registry("small"), worker.Config{Queues: map[string]int{"default": 5}})
	if _, err := small.InsertWorkflow(ctx, p); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rootRunning:
	case <-time.After(30 * time.Second):
		t.Fatal("the small worker did not start the root in 30 s")
	}
	large := pgqueue.New(db.NewPool(t, 8), pgqueue.Config{Logger: quietLogger(), ReleaseChunk: chunk})
	b := startWorker(t, large, registry("large"), worker.Config{Queues: map[string]int{"default": 50}})
	close(largeStarted)
	testwatch.WaitFor(t, time.Minute, "the fan-out to complete", func() bool {
		return a.Stats().Completed+b.Stats().Completed == width+1
	})
	mu.Lock()
	defer mu.Unlock()
	if ran["large"] < width/4 {
		t.Fatalf("the worker with room ran %d of %d tasks, the one that completed the root %d", ran["large"], width, ran["small"])
	}
	t.Logf("the worker with room ran %d tasks, the one that completed the root %d", ran["large"], ran["small"])
}

// TestFanOutUnderALimit: a fan-out whose tasks a concurrency limit of 2
// governs runs through a worker with room for 20: every task runs once,
// never more than 2 at a time, the fan-in last, and the tasks after the
// first go from one outcome's round trip to the next (claimed by the
// outcomes that free their slots, ClaimInfo.Finish).
func TestFanOutUnderALimit(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	const width, limit = 40, 2
	c := pgqueue.New(db.NewPool(t, 8), pgqueue.Config{Logger: quietLogger()})
	if err := c.SetLimit(ctx, pgqueue.Limit{Name: "wl", Queue: "wl", Concurrency: limit}); err != nil {
		t.Fatal(err)
	}
	p := fanOut("effect", "wl", "wl", width, true)
	if _, err := c.InsertWorkflow(ctx, p); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	runs := map[string]int{}
	var now, most int
	var sumAfter int
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[effectArgs]) error {
		mu.Lock()
		now++
		most = max(most, now)
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		now--
		runs[job.TaskName]++
		if job.TaskName == "sum" {
			sumAfter = len(runs) - 1
		}
		return nil
	})
	hooks, byOutcomes := finishClaims()
	w := startWorker(t, c, reg, worker.Config{Queues: map[string]int{"wl": 20}, Hooks: hooks})
	testwatch.WaitFor(t, time.Minute, "the workflow to complete", func() bool { return w.Stats().Completed == width+2 })
	mu.Lock()
	defer mu.Unlock()
	for name, n := range runs {
		if n != 1 {
			t.Fatalf("task %s ran %d times", name, n)
		}
	}
	if len(runs) != width+2 || sumAfter != width+1 || most > limit {
		t.Fatalf("%d tasks ran, the fan-in after %d, at most %d at once; want %d, after %d, at most %d", len(runs), sumAfter, most, width+2, width+1, limit)
	}
	if byOutcomes.Load() == 0 {
		t.Fatal("no task was claimed by the outcome that freed its slot")
	}
	t.Logf("%d of %d tasks claimed by outcomes", byOutcomes.Load(), width+1)
}
