package jobfence_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/workflow"
)

// childTask is a task of a child workflow: it records N*10 plus the sum of
// its dependency "a"'s output, fails for good when Fail is set, and when
// Block is set reports its start on the test's channel and runs until its
// context is cancelled (a minute at most).
type childTask struct {
	N     int  `json:"n"`
	Fail  bool `json:"fail,omitempty"`
	Block bool `json:"block,omitempty"`
}

func (childTask) Kind() string { return "child_task" }

// parentJob starts a child workflow of tasks "a" and "b" (b after a) with
// the given flags, awaits it and records the child's "b" output, or, if
// the child failed, a string naming its counts.
type parentJob struct {
	FailOnce  bool `json:"fail_once,omitempty"`
	ChildFail bool `json:"child_fail,omitempty"`
	Block     bool `json:"block,omitempty"`
}

func (parentJob) Kind() string { return "parent_job" }

type childHarness struct {
	started   chan int64  // a blocking child task started (its job ID)
	cancelled chan int64  // a blocking child task saw its context cancelled
	childIDs  chan string // StartChild's result, each attempt
	failed    calls       // "parent" counts the parent's deliberate failures
}

func childRegistry(h *childHarness) *jobfence.Registry {
	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[childTask]) error {
		if job.Args.Fail {
			return jobfence.JobCancel(errors.New("the child task fails for good"))
		}
		if job.Args.Block {
			h.started <- job.ID
			select {
			case <-ctx.Done():
				h.cancelled <- job.ID
				return ctx.Err()
			case <-time.After(time.Minute):
				return errors.New("not cancelled within a minute")
			}
		}
		sum := job.Args.N * 10
		if a, err := workflow.Output[int](ctx, "a"); err == nil {
			sum += a
		}
		return jobfence.RecordOutput(ctx, sum)
	})
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[parentJob]) error {
		wf := workflow.New("child of "+fmt.Sprint(job.ID)).
			Add("a", childTask{N: 1, Block: job.Args.Block}, nil).
			Add("b", childTask{N: 2, Fail: job.Args.ChildFail}, &workflow.TaskOpts{DependsOn: []string{"a"}}).
			Add("c", childTask{N: 3}, &workflow.TaskOpts{DependsOn: []string{"b"}})
		id, err := workflow.StartChild(ctx, wf)
		if err != nil {
			return err
		}
		h.childIDs <- id
		if job.Args.FailOnce && h.failed.get("parent") == 0 {
			h.failed.add("parent")
			return errors.New("the parent fails after starting its child")
		}
		info, err := workflow.AwaitChild(ctx, id, time.Minute)
		if errors.Is(err, workflow.ErrChildFailed) {
			return jobfence.RecordOutput(ctx, fmt.Sprintf("child failed: completed %d, cancelled %d",
				info.Counts[queue.StateCompleted], info.Counts[queue.StateCancelled]))
		}
		if err != nil {
			return err
		}
		c, err := workflow.ChildOutput[int](info, "c")
		if err != nil {
			return err
		}
		return jobfence.RecordOutput(ctx, fmt.Sprintf("child %s: c=%d", id, c))
	})
	return reg
}

func newChildHarness() *childHarness {
	return &childHarness{started: make(chan int64, 16), cancelled: make(chan int64, 16), childIDs: make(chan string, 16)}
}

// childCount counts the child workflows of job id.
func childCount(t *testing.T, pool *pgxpool.Pool, id int64) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM jobfence_workflows WHERE parent_job_id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestChildWorkflowResumesItsParent: a job starts a child workflow of
// three tasks and awaits it. The queue has one slot, so the child's tasks
// can only run because the parent suspended, holding none; the parent
// resumes with the child's outputs, and completes; the lineage reads both
// ways.
func TestChildWorkflowResumesItsParent(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	h := newChildHarness()
	c := newClient(t, db.Pool, jobfence.Config{Queues: map[string]int{"default": 1}, Handlers: childRegistry(h)})
	res, err := c.Insert(ctx, parentJob{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	j, err := c.Wait(wctx, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != queue.StateCompleted {
		t.Fatalf("parent is %s (%v), want completed", j.State, j.Errors)
	}
	kids, err := c.Workflows().Children(ctx, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(kids) != 1 {
		t.Fatalf("parent has %d child workflows, want 1", len(kids))
	}
	// c = 30 + a's output (10), read through b.
	if want := fmt.Sprintf(`"child %s: c=40"`, kids[0].ID); string(j.Output) != want {
		t.Errorf("parent's output %s, want %s", j.Output, want)
	}
	w, err := c.Workflows().Get(ctx, kids[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if w.ParentJobID != res.ID || w.Counts[queue.StateCompleted] != 3 {
		t.Errorf("child workflow: parent %d, counts %v; want parent %d, 3 completed", w.ParentJobID, w.Counts, res.ID)
	}
	// The parent suspended awaiting the child: its wait's timer is
	// recorded, and the signal the wait took.
	var waits int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_steps WHERE job_id = $1 AND name IN ($2, $2 || ':wait')`,
		res.ID, "jobfence:signal:jobfence:child:"+kids[0].ID).Scan(&waits); err != nil || waits != 2 {
		t.Errorf("the parent's wait: %d steps (%v), want its timer and its signal", waits, err)
	}
}

// retryLater retries a failed job in an hour: the test retries it.
type retryLater struct{}

func (retryLater) NextRetry(*queue.Job) time.Time { return time.Now().Add(time.Hour) }

// TestChildStartedOnceAcrossAttempts: a parent that fails after starting
// its child gets, on its retry, the same child from its recorded step;
// and when the record is lost (a crash between the child's insert and the
// step's record, made here by deleting the step), the retried start
// derives the same ID and finds the child rather than insert a second.
func TestChildStartedOnceAcrossAttempts(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	h := newChildHarness()
	cfg := jobfence.Config{Queues: map[string]int{"default": 2}, Handlers: childRegistry(h)}
	cfg.Worker.RetryPolicy = retryLater{}
	c := newClient(t, db.Pool, cfg)
	res, err := c.Insert(ctx, parentJob{FailOnce: true, Block: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	first := recv(t, h.childIDs, "the first start")
	// The child's first task blocks until cancelled: the child cannot end
	// meanwhile. Forget the parent's record of its start, as a crash
	// right after the insert would have.
	recv(t, h.started, "the child's first task")
	waitState(t, c, res.ID, queue.StateRetryable)
	if _, err := db.Pool.Exec(ctx, `DELETE FROM jobfence_steps WHERE job_id = $1 AND name = 'jobfence:child'`, res.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.Retry(ctx, res.ID); err != nil {
		t.Fatal(err)
	}
	second := recv(t, h.childIDs, "the retried start")
	if first != second {
		t.Errorf("the retried start returned child %s, the first %s", second, first)
	}
	if n := childCount(t, db.Pool, res.ID); n != 1 {
		t.Errorf("the parent has %d child workflows, want 1", n)
	}
	waitState(t, c, res.ID, queue.StateScheduled)
	var step int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_steps WHERE job_id = $1 AND name = 'jobfence:child'`, res.ID).Scan(&step); err != nil || step != 1 {
		t.Errorf("the retried start's record: %d rows (%v), want 1", step, err)
	}
	// Unblock the child by cancelling its parent: the cascade ends it.
	if err := c.Cancel(ctx, res.ID); err != nil {
		t.Fatal(err)
	}
	recv(t, h.cancelled, "the child task's cancel")
}

// TestCancelParentCancelsChildren: cancelling a parent suspended awaiting
// its child cancels the child workflow: the running task's handler is
// cancelled through its worker, the pending ones cancelled; the same
// through Workflows().Cancel of the parent's own workflow.
func TestCancelParentCancelsChildren(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	h := newChildHarness()
	c := newClient(t, db.Pool, jobfence.Config{Queues: map[string]int{"default": 2}, Handlers: childRegistry(h)})
	start(t, c)
	for _, via := range []string{"Cancel", "Workflows().Cancel"} {
		var parent int64
		var parentWF string
		if via == "Cancel" {
			res, err := c.Insert(ctx, parentJob{Block: true}, nil)
			if err != nil {
				t.Fatal(err)
			}
			parent = res.ID
		} else {
			r, err := c.InsertWorkflow(ctx, workflow.New("outer").Add("p", parentJob{Block: true}, nil))
			if err != nil {
				t.Fatal(err)
			}
			parent, parentWF = r.Tasks["p"], r.ID
		}
		child := recv(t, h.childIDs, via+": the child's start")
		task := recv(t, h.started, via+": the child's first task")
		waitState(t, c, parent, queue.StateScheduled)
		if via == "Cancel" {
			if err := c.Cancel(ctx, parent); err != nil {
				t.Fatal(err)
			}
		} else {
			n, err := c.Workflows().Cancel(ctx, parentWF)
			if err != nil || n != 1 {
				t.Fatalf("%s: cancelled %d (%v), want the suspended parent", via, n, err)
			}
		}
		if got := recv(t, h.cancelled, via+": the running child task's cancel"); got != task {
			t.Errorf("%s: task %d cancelled, want %d", via, got, task)
		}
		w, err := c.Workflows().Get(ctx, child)
		if err != nil {
			t.Fatal(err)
		}
		if !w.Done() || w.Counts[queue.StateCancelled] != 3 {
			t.Errorf("%s: child workflow counts %v, want 3 cancelled", via, w.Counts)
		}
		if j := waitState(t, c, parent, queue.StateCancelled); j.State != queue.StateCancelled {
			t.Errorf("%s: parent is %s", via, j.State)
		}
		if via != "Cancel" {
			outer, err := c.Workflows().Get(ctx, parentWF)
			if err != nil {
				t.Fatal(err)
			}
			if len(outer.Children) != 1 || outer.Children[0].ID != child || outer.Children[0].ParentJobID != parent {
				t.Errorf("outer workflow's children %+v, want %s of job %d", outer.Children, child, parent)
			}
		}
	}
}

// TestChildFailureReachesItsParent: a child whose task fails for good
// (its dependents cancelled) ends, and the parent's AwaitChild returns
// ErrChildFailed with the child's counts, which the handler handles.
func TestChildFailureReachesItsParent(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	h := newChildHarness()
	c := newClient(t, db.Pool, jobfence.Config{Queues: map[string]int{"default": 2}, Handlers: childRegistry(h)})
	res, err := c.Insert(ctx, parentJob{ChildFail: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	j, err := c.Wait(wctx, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := `"child failed: completed 1, cancelled 2"`; j.State != queue.StateCompleted || string(j.Output) != want {
		t.Errorf("parent: %s, output %s (%v); want completed with %s", j.State, j.Output, j.Errors, want)
	}
}

// awaitOther awaits workflow ID as its child.
type awaitOther struct {
	ID string `json:"id"`
}

func (awaitOther) Kind() string { return "await_other" }

// TestAwaitChildOfAnotherJob: a job cannot await a workflow it did not
// start (nor an unknown one), nor start a child outside a handler.
func TestAwaitChildOfAnotherJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if _, err := workflow.StartChild(ctx, workflow.New("x")); !errors.Is(err, workflow.ErrNotInHandler) {
		t.Errorf("StartChild outside a handler = %v, want ErrNotInHandler", err)
	}
	db := pgtest.New(t)
	reg := childRegistry(newChildHarness())
	type result struct {
		id  string
		err error
	}
	got := make(chan result, 2)
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[awaitOther]) error {
		_, err := workflow.AwaitChild(ctx, job.Args.ID, time.Minute)
		got <- result{job.Args.ID, err}
		return nil
	})
	c := newClient(t, db.Pool, jobfence.Config{Queues: map[string]int{"default": 1}, Handlers: reg})
	r, err := c.InsertWorkflow(ctx, workflow.New("plain").Add("x", childTask{N: 1}, nil))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]error{r.ID: workflow.ErrNotChild, "5b0e8c3e-1f0a-4c59-9d55-0b8a1d2f6e41": workflow.ErrNotFound}
	for id := range want {
		if _, err := c.Insert(ctx, awaitOther{ID: id}, nil); err != nil {
			t.Fatal(err)
		}
	}
	start(t, c)
	for range want {
		r := recv(t, got, "the handler's AwaitChild")
		if !errors.Is(r.err, want[r.id]) {
			t.Errorf("AwaitChild of workflow %s = %v, want %v", r.id, r.err, want[r.id])
		}
	}
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("%s: nothing within a minute", what)
		panic("unreachable")
	}
}
