package jobfence_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/jobfencetest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/worker"
	"github.com/jobfence/jobfence/workflow"
)

// TestClientWorkflows: a client inserts a workflow, in its own
// transaction or the caller's, appends to it, and reads, lists, cancels
// and retries it; bad input says what is wrong.
func TestClientWorkflows(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[greet]) error {
		if job.Args.Name == "fail" {
			return worker.JobCancel(context.Canceled)
		}
		return nil
	})
	c := newClient(t, db.Pool, jobfence.Config{Queues: map[string]int{"default": 1}, Handlers: reg})
	wfs := c.Workflows()

	_, err := c.InsertWorkflow(ctx, nil)
	wantErr(t, "InsertWorkflow(nil)", err, nil, "jobfence: insert workflow: nil workflow")
	_, err = c.InsertWorkflow(ctx, workflow.New("bad").Add("a", greet{}, &workflow.TaskOpts{DependsOn: []string{"missing"}}))
	wantErr(t, "InsertWorkflow with a missing dependency", err, workflow.ErrInvalid, `"missing"`)

	res, err := c.InsertWorkflow(ctx, workflow.New("order").
		Add("a", greet{Name: "a"}, nil).
		Add("b", greet{Name: "fail"}, &workflow.TaskOpts{DependsOn: []string{"a"}}))
	if err != nil || res.ID == "" || len(res.Tasks) != 2 {
		t.Fatalf("InsertWorkflow: %+v, %v", res, err)
	}
	// An append joins the running workflow, its tasks depending on its own.
	app, err := c.InsertWorkflow(ctx, workflow.Append(res.ID).Add("c", greet{Name: "c"}, &workflow.TaskOpts{DependsOn: []string{"b"}, RunAnyway: true}))
	if err != nil || app.ID != res.ID || app.Tasks["c"] == 0 {
		t.Fatalf("InsertWorkflow of an append: %+v, %v", app, err)
	}
	// One inserted in a rolled-back transaction does not exist.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gone, err := c.InsertWorkflowTx(ctx, tx, workflow.New("rolled back").Add("a", greet{}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = wfs.Get(ctx, gone.ID)
	wantErr(t, "Get of a rolled-back workflow", err, jobfence.ErrWorkflowNotFound, gone.ID)
	var kept jobfence.WorkflowResult
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		kept, err = c.InsertWorkflowTx(ctx, tx, workflow.New("committed").Add("a", greet{Name: "k"}, nil))
		return err
	}); err != nil {
		t.Fatal(err)
	}

	w := jobfencetest.NewWorker(t, c)
	w.Drain(ctx, t, "default")
	info, err := wfs.Get(ctx, res.ID)
	if err != nil || info.Name != "order" || info.Total() != 3 || len(info.Tasks) != 3 || !info.Done() {
		t.Fatalf("Get: %+v, %v; want order's 3 tasks, done", info, err)
	}
	if info.Counts[queue.StateCancelled] != 1 || info.Counts[queue.StateCompleted] != 2 {
		t.Errorf("counts %v, want b cancelled, a and c completed", info.Counts)
	}
	list, err := wfs.List(ctx, jobfence.WorkflowListParams{})
	if err != nil || len(list) != 2 || list[0].ID != kept.ID || list[1].ID != res.ID {
		t.Fatalf("List: %d workflows, %v; want committed then order", len(list), err)
	}
	if one, err := wfs.List(ctx, jobfence.WorkflowListParams{Limit: 1}); err != nil || len(one) != 1 {
		t.Errorf("List with Limit 1: %d, %v", len(one), err)
	}

	// Retry resets the cancelled task; Cancel cancels it again before it runs.
	if n, err := wfs.Retry(ctx, res.ID); err != nil || n != 1 {
		t.Fatalf("Retry: %d, %v; want the 1 cancelled task reset", n, err)
	}
	if n, err := wfs.Cancel(ctx, res.ID); err != nil || n != 1 {
		t.Fatalf("Cancel: %d, %v; want the 1 waiting task cancelled", n, err)
	}

	for what, err := range map[string]error{
		"Get":    func() error { _, err := wfs.Get(ctx, ""); return err }(),
		"Cancel": func() error { _, err := wfs.Cancel(ctx, ""); return err }(),
		"Retry":  func() error { _, err := wfs.Retry(ctx, ""); return err }(),
	} {
		wantErr(t, what+` of ""`, err, nil, "a workflow ID is required")
	}
	_, err = wfs.Cancel(ctx, "00000000-0000-0000-0000-000000000001")
	wantErr(t, "Cancel of an unknown workflow", err, jobfence.ErrWorkflowNotFound)
	_, err = wfs.Retry(ctx, "not-a-uuid")
	wantErr(t, "Retry of a malformed ID", err, jobfence.ErrWorkflowNotFound, "not a UUID")
}
