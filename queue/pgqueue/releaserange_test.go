package pgqueue_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// rangeChunk is the chunk the tests of ranges give their clients: a
// fan-out of rangeWidth leaves rangeWidth-rangeChunk dependents in three
// ranges (11-20, 21-30, 31-35).
const (
	rangeChunk = 10
	rangeWidth = 35
)

// newRangeClient is newClient with a chunk of rangeChunk.
func newRangeClient(t *testing.T) (*pgqueue.Client, *pgtest.DB) {
	t.Helper()
	db := pgtest.New(t)
	return pgqueue.New(db.Pool, pgqueue.Config{ReleaseChunk: rangeChunk}), db
}

// rangeFanOut inserts a workflow in which rangeWidth tasks of queue "fan"
// depend on "root" and on "gate", a task of queue "gate" (so that each
// keeps a dependency once root's completion released it, and one
// released twice would show: it would have none left), and "sum" on all
// of them. It completes root in a transaction of its own, through
// FinishTx, which runs no release after the commit, and returns the
// workflow's ID and root's ID.
func rangeFanOut(t *testing.T, c *pgqueue.Client, db *pgtest.DB) (string, int64) {
	t.Helper()
	ctx := context.Background()
	p := queue.WorkflowParams{Name: "ranges", Tasks: []queue.WorkflowTask{task("root", "root"), task("gate", "gate")}}
	names := make([]string, rangeWidth)
	for i := range names {
		names[i] = fmt.Sprintf("task-%02d", i)
		p.Tasks = append(p.Tasks, task(names[i], "fan", "root", "gate"))
	}
	p.Tasks = append(p.Tasks, task("sum", "fan", names...))
	res, err := c.InsertWorkflow(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	root := claimOne(t, c, "root")
	completeTaskInTx(t, c, db, root)
	return res.ID, root.ID
}

// completeTaskInTx completes workflow task job in a transaction of its
// own, through FinishTx, as a transactional handler's completion does: it
// releases the first chunk of the task's dependents and notifies their
// queues inside the transaction, and runs no release after the commit.
func completeTaskInTx(t *testing.T, c *pgqueue.Client, db *pgtest.DB, job *queue.Job) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := c.FinishTx(ctx, tx, queue.Finish{Lease: job.Lease(), Outcome: queue.OutcomeComplete, Workflow: true}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// fanStates counts the fan's tasks by state and dependencies left.
func fanStates(t *testing.T, db *pgtest.DB, workflow string) map[string]int {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `
SELECT state || '/' || deps_left, count(*) FROM jobfence_jobs
WHERE workflow_id = $1 AND task_name LIKE 'task-%' GROUP BY 1`, workflow)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		out[k] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// waitFanAvailable waits, 30 s at most, for every task of the fan of
// workflow wf to be available with no dependency left.
func waitFanAvailable(t *testing.T, db *pgtest.DB, wf string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := fanStates(t, db, wf)
		if got["available/0"] == rangeWidth {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the completion: %v, want %d available with no dependency left", got, rangeWidth)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ranges lists the ranges left to release of task id as "first-last".
func ranges(t *testing.T, db *pgtest.DB, id int64) []string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT first || '-' || last FROM jobfence_releases WHERE task_id = $1 ORDER BY first`, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFanOutReleasedInRanges: the completion of a task with more
// dependents than a chunk releases the first chunk itself and records the
// rest as ranges; a zombie's completion records none; the ranges,
// released by clients at once, release each dependent once.
func TestFanOutReleasedInRanges(t *testing.T) {
	ctx := context.Background()
	c, db := newRangeClient(t)
	wf, root := rangeFanOut(t, c, db)
	if got, want := fanStates(t, db, wf), map[string]int{"pending/1": rangeChunk, "pending/2": rangeWidth - rangeChunk}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the completion: %v, want %v (the first chunk released, the rest not yet)", got, want)
	}
	if got := fmt.Sprint(ranges(t, db, root)); got != "[11-20 21-30 31-35]" {
		t.Fatalf("ranges recorded %s, want [11-20 21-30 31-35]", got)
	}

	// A stale completion of root (a zombie's: the fence is old) records
	// nothing more.
	var fence int64
	if err := db.Pool.QueryRow(ctx, `SELECT fence FROM jobfence_jobs WHERE id = $1`, root).Scan(&fence); err != nil {
		t.Fatal(err)
	}
	zombie := queue.Finish{Lease: queue.Lease{ID: root, Fence: fence - 1}, Outcome: queue.OutcomeComplete, Workflow: true}
	if stale := finish(t, c, zombie); len(stale) != 1 {
		t.Fatalf("the zombie's completion was accepted")
	}
	if got := fmt.Sprint(ranges(t, db, root)); got != "[11-20 21-30 31-35]" {
		t.Fatalf("ranges after the zombie's completion %s, want [11-20 21-30 31-35]", got)
	}

	// Clients release at once, each range once: a dependent released
	// twice would have no dependency left (gate is not done).
	var wg sync.WaitGroup
	counts := make([]int, 3)
	errs := make([]error, 3)
	for i := range counts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			other := pgqueue.New(db.Pool, pgqueue.Config{})
			ids := []int64{root}
			if i == 0 {
				ids = nil // as a worker's maintenance asks
			}
			counts[i], errs[i] = other.ReleaseDependents(ctx, ids)
		}()
	}
	wg.Wait()
	total := 0
	for i, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
		total += counts[i]
	}
	if total != 3 {
		t.Fatalf("the clients released %v ranges, want 3 in all", counts)
	}
	if got, want := fanStates(t, db, wf), map[string]int{"pending/1": rangeWidth}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after the ranges: %v, want %v (each released once)", got, want)
	}
	if got := ranges(t, db, root); len(got) != 0 {
		t.Fatalf("ranges left %v, want none", got)
	}
	if n, err := c.ReleaseDependents(ctx, nil); n != 0 || err != nil {
		t.Fatalf("ReleaseDependents with nothing left = %d, %v", n, err)
	}

	// gate's completion releases them all (a chunk is per task).
	g := claimOne(t, c, "gate")
	finish(t, c, queue.Finish{Lease: g.Lease(), Outcome: queue.OutcomeComplete, Workflow: true})
	waitFanAvailable(t, db, wf)
	if got := ranges(t, db, g.ID); len(got) != 0 {
		t.Fatalf("gate's ranges left %v, want none", got)
	}
}

// TestRangesSkipATaskAppendedLater: a task appended to a completed task
// whose dependents are still being released does not count it among its
// dependencies, and no range reaches it.
func TestRangesSkipATaskAppendedLater(t *testing.T) {
	ctx := context.Background()
	c, db := newRangeClient(t)
	wf, root := rangeFanOut(t, c, db)
	if _, err := c.InsertWorkflow(ctx, queue.WorkflowParams{ID: wf, Tasks: []queue.WorkflowTask{task("late", "late", "root", "gate")}}); err != nil {
		t.Fatal(err)
	}
	if n, err := c.ReleaseDependents(ctx, []int64{root}); n != 3 || err != nil {
		t.Fatalf("ReleaseDependents = %d, %v; want 3 ranges", n, err)
	}
	w, err := c.Workflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range w.Tasks {
		if tk.TaskName == "late" && (tk.State != queue.StatePending || tk.DepsLeft != 1) {
			t.Fatalf("late is %s with %d dependencies left, want pending with 1 (gate)", tk.State, tk.DepsLeft)
		}
	}
}

// TestFanOutReleasedAfterFinish: through Finish, the client that
// completed a fan-out's root releases the ranges itself, in the
// background, without a worker's maintenance.
func TestFanOutReleasedAfterFinish(t *testing.T) {
	ctx := context.Background()
	c, db := newRangeClient(t)
	defer c.Close()
	p, _ := fanParams("fan", "root", rangeWidth)
	res, err := c.InsertWorkflow(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	root := claimOne(t, c, "root")
	finish(t, c, queue.Finish{Lease: root.Lease(), Outcome: queue.OutcomeComplete, Workflow: true})
	waitFanAvailable(t, db, res.ID)
	if got := ranges(t, db, root.ID); len(got) != 0 {
		t.Fatalf("ranges left %v, want none", got)
	}
}

// TestWaitReleasesWaitsForThoseRunning: WaitReleases waits for the
// releases the client was running in the background when it was called,
// and not for one started meanwhile, so that a stopping worker is not held
// for as long as its context allows by a client that keeps completing
// fan-outs. A row lock on each fan-out's last dependent keeps its range
// waiting.
func TestWaitReleasesWaitsForThoseRunning(t *testing.T) {
	ctx := context.Background()
	c, db := newRangeClient(t)
	defer c.Close()
	fan := func(name string) (string, *queue.Job, pgx.Tx) {
		p, _ := fanParams(name, name+"-root", rangeChunk+5)
		res, err := c.InsertWorkflow(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		tx := pgtest.Begin(t, db.Pool)
		if _, err := tx.Exec(ctx, `SELECT FROM jobfence_jobs WHERE id = (SELECT max(id) FROM jobfence_jobs WHERE workflow_id = $1) FOR UPDATE`, res.ID); err != nil {
			t.Fatal(err)
		}
		return res.ID, claimOne(t, c, name+"-root"), tx
	}
	first, root1, lock1 := fan("first")
	second, root2, lock2 := fan("second")
	finish(t, c, queue.Finish{Lease: root1.Lease(), Outcome: queue.OutcomeComplete, Workflow: true})
	waited := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		waited <- c.WaitReleases(wctx)
	}()
	// Give the wait time to take its snapshot before the second release starts.
	time.Sleep(200 * time.Millisecond)
	finish(t, c, queue.Finish{Lease: root2.Lease(), Outcome: queue.OutcomeComplete, Workflow: true})
	select {
	case err := <-waited:
		t.Fatalf("WaitReleases returned (%v) while the first fan-out's range was still held up", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := lock1.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitReleases still waits once the first fan-out's range could go: it waits for the second, started after it was called")
	}
	for wf, want := range map[string]int{first: 0, second: 1} {
		if n, err := c.ReleasesLeft(ctx, wf); err != nil || n != want {
			t.Fatalf("workflow %s: %d ranges left (%v), want %d", wf, n, err, want)
		}
	}
	if err := lock2.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReleases(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := c.ReleasesLeft(ctx, second); err != nil || n != 0 {
		t.Fatalf("second workflow: %d ranges left (%v) once its range could go, want none", n, err)
	}
}
