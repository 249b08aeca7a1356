package jobfence_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/jobfencetest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/workflow"
)

// quote doubles N, recording {"total": 2N}, or fails as Mode says.
type quote struct {
	N    int    `json:"n"`
	Mode string `json:"mode,omitempty"` // "fail", "cancel", "silent"
}

func (quote) Kind() string { return "quote" }

type quoteOut struct {
	Total int `json:"total"`
}

func quoteClient(t *testing.T, db *pgtest.DB) *jobfence.Client {
	t.Helper()
	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[quote]) error {
		switch job.Args.Mode {
		case "fail":
			return errors.New("card declined")
		case "cancel":
			return jobfence.JobCancel(errors.New("out of stock"))
		case "silent":
			return nil
		}
		return jobfence.RecordOutput(ctx, quoteOut{Total: 2 * job.Args.N})
	})
	return newClient(t, db.Pool, jobfence.Config{Queues: map[string]int{"default": 1}, Handlers: reg})
}

// TestResult: Result returns a completed job's output decoded, and for a
// discarded or cancelled job a *JobFailedError that names the job, its
// end and its last error; a job without output, an unknown ID and a ctx
// that ends first are errors of their own.
func TestResult(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	c := quoteClient(t, db)
	insert := func(q quote, opts *jobfence.InsertOpts) int64 {
		t.Helper()
		r, err := c.Insert(ctx, q, opts)
		if err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	ok := insert(quote{N: 21}, nil)
	failed := insert(quote{Mode: "fail"}, &jobfence.InsertOpts{MaxAttempts: 1})
	cancelled := insert(quote{Mode: "cancel"}, nil)
	silent := insert(quote{Mode: "silent"}, nil)

	// Awaited before the jobs run: Result waits.
	type res struct {
		v   quoteOut
		err error
	}
	okc := make(chan res, 1)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	go func() {
		v, err := jobfence.Result[quoteOut](wctx, c, ok)
		okc <- res{v, err}
	}()
	if rs := jobfencetest.NewWorker(t, c).Drain(ctx, t, "default"); len(rs) != 4 {
		t.Fatalf("Drain ran %d jobs, want 4", len(rs))
	}
	if r := <-okc; r.err != nil || r.v.Total != 42 {
		t.Fatalf("Result of the completed job: %+v, %v; want total 42", r.v, r.err)
	}

	_, err := jobfence.Result[quoteOut](ctx, c, failed)
	wantErr(t, "Result of a discarded job", err, jobfence.ErrJobFailed,
		"job "+strconv.FormatInt(failed, 10)+" (quote) was discarded after 1 attempt: card declined")
	var fe *jobfence.JobFailedError
	if !errors.As(err, &fe) || fe.ID != failed || fe.State != queue.StateDiscarded || fe.LastError != "card declined" {
		t.Errorf("Result of a discarded job: %#v, want a *JobFailedError for job %d", err, failed)
	}
	_, err = jobfence.Result[quoteOut](ctx, c, cancelled)
	wantErr(t, "Result of a cancelled job", err, jobfence.ErrJobFailed, "was cancelled after 1 attempt", "out of stock")

	// Cancelled before it ran: no attempt, no error.
	early := insert(quote{N: 1}, &jobfence.InsertOpts{Queue: "later"})
	if err := c.Cancel(ctx, early); err != nil {
		t.Fatal(err)
	}
	_, err = jobfence.Result[quoteOut](ctx, c, early)
	wantErr(t, "Result of a job cancelled before it ran", err, jobfence.ErrJobFailed, "was cancelled before it ran: cancelled by request")

	_, err = jobfence.Result[quoteOut](ctx, c, silent)
	wantErr(t, "Result of a job without output", err, jobfence.ErrNoOutput, "without recording an output")
	_, err = jobfence.Result[[]string](ctx, c, ok)
	wantErr(t, "Result into the wrong type", err, nil, "does not decode into []string")
	_, err = jobfence.Result[quoteOut](ctx, c, 1<<40)
	wantErr(t, "Result of an unknown ID", err, jobfence.ErrJobNotFound, "pruned")

	pending := insert(quote{N: 2}, &jobfence.InsertOpts{Queue: "later"})
	tctx, tcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer tcancel()
	_, err = jobfence.Result[quoteOut](tctx, c, pending)
	wantErr(t, "Result past ctx's deadline", err, context.DeadlineExceeded)

	j, err := c.Wait(ctx, ok)
	if err != nil || j.State != queue.StateCompleted || !strings.Contains(string(j.Output), "42") {
		t.Errorf("Wait: %+v, %v; want the completed job with its output", j, err)
	}
}

// TestWorkflowsWait: Workflows().Wait returns once every task has ended,
// completed or not, with the tasks; an unknown ID is ErrWorkflowNotFound.
func TestWorkflowsWait(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	c := quoteClient(t, db)
	ok, err := c.InsertWorkflow(ctx, workflow.New("ok").
		Add("a", quote{N: 1}, nil).
		Add("b", quote{N: 2}, &workflow.TaskOpts{DependsOn: []string{"a"}}))
	if err != nil {
		t.Fatal(err)
	}
	bad, err := c.InsertWorkflow(ctx, workflow.New("bad").
		Add("a", quote{Mode: "fail"}, &workflow.TaskOpts{Insert: &jobfence.InsertOpts{MaxAttempts: 1}}).
		Add("b", quote{N: 2}, &workflow.TaskOpts{DependsOn: []string{"a"}}))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		w, err := c.Workflows().Wait(wctx, ok.ID)
		if err == nil && (!w.Done() || w.Counts[queue.StateCompleted] != 2 || len(w.Tasks) != 2) {
			err = fmt.Errorf("workflow %+v not done with 2 completed tasks", w.Counts)
		}
		done <- err
	}()
	jobfencetest.NewWorker(t, c).Drain(ctx, t, "default")
	if err := <-done; err != nil {
		t.Fatalf("Workflows().Wait: %v", err)
	}
	w, err := workflow.Wait(ctx, c.PGQueue(), bad.ID)
	if err != nil || w.Counts[queue.StateDiscarded] != 1 || w.Counts[queue.StateCancelled] != 1 {
		t.Fatalf("workflow.Wait of a failed workflow: %+v, %v; want 1 discarded, 1 cancelled", w, err)
	}
	_, err = c.Workflows().Wait(ctx, "00000000-0000-0000-0000-000000000000")
	wantErr(t, "Wait of an unknown workflow", err, jobfence.ErrWorkflowNotFound)
}
