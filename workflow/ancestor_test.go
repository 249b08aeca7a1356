package workflow_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
	"github.com/jobfence/jobfence/workflow"
)

type stepArgs struct {
	Read string `json:"read"`
}

func (stepArgs) Kind() string { return "step" }

// TestOutputOfAnyAncestor: a task reads the output of its grandparent (a
// -> b -> c: c reads a), and a read of a sibling's output (c reads s,
// which depends on b too) or of a name the workflow lacks fails with an
// error wrapping ErrNotAncestor that the worker takes as final: the task
// is cancelled with the message, after one attempt, not retried up to its
// 25.
func TestOutputOfAnyAncestor(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quiet()})
	wf := workflow.New("ancestors").
		Add("a", stepArgs{}, nil).
		Add("b", stepArgs{}, &workflow.TaskOpts{DependsOn: []string{"a"}}).
		Add("s", stepArgs{}, &workflow.TaskOpts{DependsOn: []string{"b"}}).
		Add("c", stepArgs{Read: "a"}, &workflow.TaskOpts{DependsOn: []string{"b"}}).
		Add("wrong", stepArgs{Read: "s"}, &workflow.TaskOpts{DependsOn: []string{"b"}, Insert: &queue.InsertOpts{MaxAttempts: 25}}).
		Add("unknown", stepArgs{Read: "nope"}, &workflow.TaskOpts{DependsOn: []string{"b"}, Insert: &queue.InsertOpts{MaxAttempts: 25}})
	res, err := workflow.Insert(ctx, c, wf)
	if err != nil {
		t.Fatal(err)
	}
	var read atomic.Value
	var errs [2]atomic.Value
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[stepArgs]) error {
		if job.Args.Read == "" {
			return worker.RecordOutput(ctx, "from "+job.TaskName)
		}
		v, err := workflow.Output[string](ctx, job.Args.Read)
		switch job.TaskName {
		case "c":
			read.Store(v)
		case "wrong":
			errs[0].Store(err)
		case "unknown":
			errs[1].Store(err)
		}
		return err
	})
	start(t, c, reg, workerConfig(30*time.Second))
	w := waitDone(t, c, res.ID)
	if got, _ := read.Load().(string); got != "from a" {
		t.Fatalf("c read %q of its grandparent a, want %q", got, "from a")
	}
	for i, name := range []string{"wrong", "unknown"} {
		err, _ := errs[i].Load().(error)
		if !errors.Is(err, workflow.ErrNotAncestor) {
			t.Fatalf("%s's Output = %v, want ErrNotAncestor", name, err)
		}
	}
	want := map[string]string{
		"wrong":   `output of task "s": jobfence: not an ancestor of this task (job `,
		"unknown": `output of task "nope": jobfence: not an ancestor of this task: jobfence: job not found: the workflow of job `,
	}
	for _, tk := range w.Tasks {
		msg, checked := want[tk.TaskName]
		if !checked {
			if tk.State != queue.StateCompleted {
				t.Fatalf("%s is %s, want completed", tk.TaskName, tk.State)
			}
			continue
		}
		if tk.State != queue.StateCancelled || tk.Attempt != 1 {
			t.Fatalf("%s is %s after %d attempts, want cancelled after 1 (not retried)", tk.TaskName, tk.State, tk.Attempt)
		}
		if len(tk.Errors) != 1 || !strings.Contains(tk.Errors[0].Error, msg) {
			t.Fatalf("%s's errors = %+v, want one containing %q", tk.TaskName, tk.Errors, msg)
		}
	}
}

type sagaArgs struct {
	Fail bool `json:"fail"`
}

func (sagaArgs) Kind() string { return "saga" }

// TestSagaRefundsOnlyAFailedShipment: charge -> ship, and refund
// (RunOnFailure on ship) runs only when ship fails, reading charge's
// output (an ancestor); when ship completes, refund is cancelled with the
// reason, unrun.
func TestSagaRefundsOnlyAFailedShipment(t *testing.T) {
	for _, shipFails := range []bool{false, true} {
		t.Run(map[bool]string{false: "ship completes", true: "ship fails"}[shipFails], func(t *testing.T) {
			db := pgtest.New(t)
			ctx := context.Background()
			c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quiet()})
			wf := workflow.New("saga").
				Add("charge", sagaArgs{}, nil).
				Add("ship", sagaArgs{Fail: shipFails}, &workflow.TaskOpts{DependsOn: []string{"charge"}, Insert: &queue.InsertOpts{MaxAttempts: 1}}).
				Add("refund", sagaArgs{}, &workflow.TaskOpts{DependsOn: []string{"ship"}, RunOnFailure: true})
			res, err := workflow.Insert(ctx, c, wf)
			if err != nil {
				t.Fatal(err)
			}
			var refunded atomic.Value
			reg := worker.NewRegistry()
			worker.Add(reg, func(ctx context.Context, job *worker.Job[sagaArgs]) error {
				switch job.TaskName {
				case "charge":
					return worker.RecordOutput(ctx, "ch_1")
				case "refund":
					id, err := workflow.Output[string](ctx, "charge")
					refunded.Store(id)
					return err
				}
				if job.Args.Fail {
					return errors.New("no stock")
				}
				return nil
			})
			start(t, c, reg, workerConfig(30*time.Second))
			w := waitDone(t, c, res.ID)
			got, _ := refunded.Load().(string)
			for _, tk := range w.Tasks {
				if tk.TaskName != "refund" {
					continue
				}
				switch {
				case shipFails && (tk.State != queue.StateCompleted || got != "ch_1"):
					t.Fatalf("refund is %s having refunded %q, want completed, refunding ch_1", tk.State, got)
				case !shipFails && (tk.State != queue.StateCancelled || got != "" || tk.Attempt != 0 ||
					len(tk.Errors) != 1 || !strings.Contains(tk.Errors[0].Error, "no dependency failed")):
					t.Fatalf("refund is %s (attempts %d, errors %+v, refunded %q), want cancelled unrun: no dependency failed",
						tk.State, tk.Attempt, tk.Errors, got)
				}
			}
		})
	}
}
