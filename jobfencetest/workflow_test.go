package jobfencetest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jobfence/jobfence/jobfencetest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
	"github.com/jobfence/jobfence/workflow"
)

type reserve struct {
	Item string `json:"item"`
}

func (reserve) Kind() string { return "reserve" }

// TestRunWorkflow: the order's charge fails for good, so reserve is
// cancelled with the reason; the run that succeeds passes charge's output
// to reserve. The assertions say what is wrong.
func TestRunWorkflow(t *testing.T) {
	ctx := context.Background()
	db := jobfencetest.NewDB(t)
	client := pgqueue.New(db.Pool, pgqueue.Config{})
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[charge]) error {
		if err := chargeHandler(ctx, job); err != nil {
			return err
		}
		return worker.RecordOutput(ctx, map[string]int{"cents": job.Args.Cents})
	})
	worker.Add(reg, func(ctx context.Context, job *worker.Job[reserve]) error {
		c, err := workflow.Output[map[string]int](ctx, "charge")
		if err != nil {
			return err
		}
		return worker.RecordOutput(ctx, job.Args.Item+" paid "+string(rune('0'+c["cents"]%10)))
	})
	w := jobfencetest.NewPGWorker(t, client, reg, worker.Config{})
	order := func(mode string) *workflow.Workflow {
		return workflow.New("order").
			Add("charge", charge{Cents: 1999, Mode: mode}, &workflow.TaskOpts{Insert: &queue.InsertOpts{MaxAttempts: 1}}).
			Add("reserve", reserve{Item: "book"}, &workflow.TaskOpts{DependsOn: []string{"charge"}})
	}
	run := jobfencetest.RunWorkflow(ctx, t, w, order(""))
	if len(run.Results) != 2 {
		t.Fatalf("ran %d attempts, want charge and reserve", len(run.Results))
	}
	run.RequireTaskState(t, "reserve", queue.StateCompleted)
	if got := jobfencetest.TaskOutput[string](t, run, "reserve"); got != "book paid 9" {
		t.Fatalf("reserve's output = %q", got)
	}
	failed := jobfencetest.RunWorkflow(ctx, t, w, order("fail"))
	failed.RequireTaskState(t, "charge", queue.StateDiscarded)
	rec := &recorder{}
	failed.RequireTaskState(rec, "reserve", queue.StateCompleted)
	jobfencetest.TaskOutput[string](rec, failed, "reserve")
	want := []string{
		`jobfencetest: task "reserve" of workflow ` + failed.ID + ` is cancelled, want completed; last error: jobfence: dependency failed: task "charge" was discarded; cancelled`,
		`jobfencetest: task "reserve" of workflow ` + failed.ID + ` (cancelled) recorded no output`,
	}
	if len(rec.msgs) != 2 || rec.msgs[0] != want[0] || rec.msgs[1] != want[1] {
		t.Fatalf("messages:\n%q\nwant\n%q", rec.msgs, want)
	}
}

type leaf struct {
	N int `json:"n"`
}

func (leaf) Kind() string { return "leaf" }

// TestRunWorkflowFanOut: a task with more dependents than its completion
// releases itself (the rest are released after the commit, in ranges)
// still has every dependent run before RunWorkflow returns.
func TestRunWorkflowFanOut(t *testing.T) {
	ctx := context.Background()
	db := jobfencetest.NewDB(t)
	const chunk, width = 10, 25 // past the 10 a completion releases itself
	client := pgqueue.New(db.Pool, pgqueue.Config{ReleaseChunk: chunk})
	defer client.Close()
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[leaf]) error { return nil })
	w := jobfencetest.NewPGWorker(t, client, reg, worker.Config{})
	wf := workflow.New("fan").Add("root", leaf{}, nil)
	for i := range width {
		wf.Add(fmt.Sprintf("leaf-%d", i), leaf{N: i}, &workflow.TaskOpts{DependsOn: []string{"root"}})
	}
	run := jobfencetest.RunWorkflow(ctx, t, w, wf)
	if len(run.Results) != width+1 {
		t.Fatalf("ran %d attempts, want %d", len(run.Results), width+1)
	}
	run.RequireTaskState(t, fmt.Sprintf("leaf-%d", width-1), queue.StateCompleted)
}
