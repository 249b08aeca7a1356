package jobfencetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
	"github.com/jobfence/jobfence/workflow"
)

// WorkflowRun is what RunWorkflow did: the workflow as stored once no task
// was ready any more, and the result of every task it ran, in order.
type WorkflowRun struct {
	// ID is the workflow's ID.
	ID string
	// Workflow holds its tasks, with their states and outputs.
	Workflow *pgqueue.WorkflowInfo
	// Results are the attempts run, in the order they ran.
	Results []*Result
}

// RunWorkflow inserts wf and runs its tasks through w's execution path (as
// WorkNext does: a claim under a fence, the handler, the fenced
// completion that stores the output and releases the dependents), one at
// a time, queue after queue, until no task of its queues is ready. A task
// that failed waits for its retry (RetryNow runs it) and its dependents
// stay pending. Jobs outside the workflow that are ready on the same
// queues run too. It fails t when wf cannot be inserted, or when more
// than ten attempts per task ran (a task that keeps snoozing).
func RunWorkflow(ctx context.Context, t TestingT, w *Worker, wf *workflow.Workflow) *WorkflowRun {
	t.Helper()
	p, err := wf.Params()
	if err != nil {
		t.Fatalf("jobfencetest: RunWorkflow: %v", err)
		return nil
	}
	res, err := workflow.Insert(ctx, w.client, wf)
	if err != nil {
		t.Fatalf("jobfencetest: RunWorkflow: %v", err)
		return nil
	}
	var queues []string
	for _, tk := range p.Tasks {
		q := tk.Params.WithDefaults().Queue
		if !slices.Contains(queues, q) {
			queues = append(queues, q)
		}
	}
	slices.Sort(queues)
	run := &WorkflowRun{ID: res.ID}
	limit := 10*len(p.Tasks) + 10
	for progressed := true; progressed; {
		progressed = false
		for _, q := range queues {
			for {
				ran, err := w.w.RunOne(ctx, q)
				if errors.Is(err, worker.ErrNoJob) {
					break
				}
				if err != nil {
					t.Fatalf("jobfencetest: RunWorkflow: run a task of queue %q: %v", q, err)
					return nil
				}
				r := w.result(ctx, t, ran)
				if r == nil {
					return nil
				}
				run.Results = append(run.Results, r)
				progressed = true
				if len(run.Results) > limit {
					t.Fatalf("jobfencetest: RunWorkflow: %d attempts ran for %d tasks; the last: %s", len(run.Results), len(p.Tasks), r)
					return nil
				}
			}
		}
		if !progressed {
			if progressed, err = w.releasesDone(ctx, res.ID); err != nil {
				t.Fatalf("jobfencetest: RunWorkflow: %v", err)
				return nil
			}
		}
	}
	if run.Workflow, err = w.client.Workflow(ctx, res.ID); err != nil {
		t.Fatalf("jobfencetest: RunWorkflow: %v", err)
		return nil
	}
	return run
}

// releasesDone waits, releasesWait at most, until workflow id has no
// dependents left to release after a completion (a task with more than
// the completion releases itself: see pgqueue.Client.ReleaseDependents),
// releasing them itself too, and reports whether there were any, so that
// RunWorkflow runs the tasks they make ready.
func (w *Worker) releasesDone(ctx context.Context, id string) (bool, error) {
	deadline := time.Now().Add(releasesWait)
	waited := false
	for {
		released, err := w.client.ReleaseDependents(ctx, nil)
		if err != nil {
			return false, err
		}
		waited = waited || released > 0
		n, err := w.client.ReleasesLeft(ctx, id)
		if err != nil || n == 0 {
			return waited, err
		}
		waited = true
		if time.Now().After(deadline) {
			return false, fmt.Errorf("%d ranges of dependents still to release after %s", n, releasesWait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// releasesWait bounds RunWorkflow's wait for the releases of another
// client (the one that completed a task) in flight.
const releasesWait = 30 * time.Second

// Task returns the task named name, failing t when the workflow has none.
func (r *WorkflowRun) Task(t TestingT, name string) *pgqueue.Task {
	t.Helper()
	for _, tk := range r.Workflow.Tasks {
		if tk.TaskName == name {
			return tk
		}
	}
	t.Fatalf("jobfencetest: workflow %s has no task %q", r.ID, name)
	return nil
}

// RequireTaskState fails t unless the task named name is in state want,
// naming its last error if it has one.
func (r *WorkflowRun) RequireTaskState(t TestingT, name string, want queue.State) {
	t.Helper()
	tk := r.Task(t, name)
	if tk == nil || tk.State == want {
		return
	}
	last := ""
	if n := len(tk.Errors); n > 0 {
		last = "; last error: " + tk.Errors[n-1].Error
	}
	t.Fatalf("jobfencetest: task %q of workflow %s is %s, want %s%s", name, r.ID, tk.State, want, last)
}

// TaskOutput returns the output the task named name recorded, decoded into
// T, failing t when it recorded none or it does not decode.
func TaskOutput[T any](t TestingT, r *WorkflowRun, name string) T {
	t.Helper()
	var v T
	tk := r.Task(t, name)
	if tk == nil {
		return v
	}
	if tk.Output == nil {
		t.Fatalf("jobfencetest: task %q of workflow %s (%s) recorded no output", name, r.ID, tk.State)
		return v
	}
	if err := json.Unmarshal(tk.Output, &v); err != nil {
		t.Fatalf("jobfencetest: task %q's output %s does not decode into %T: %v", name, tk.Output, v, err)
	}
	return v
}
