package telemetry_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/telemetry"
	"github.com/jobfence/jobfence/worker"
)

// TestWorkflowTaskSpans: a workflow task's attempt span names its
// workflow, its task and the job IDs of the tasks it depends on, which
// are the jobfence.job.id of their attempts' spans.
func TestWorkflowTaskSpans(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	in := newInstruments(t)
	jobs := pgqueue.New(db.Pool, pgqueue.Config{})
	res, err := jobs.InsertWorkflow(ctx, queue.WorkflowParams{Name: "traced", Tasks: []queue.WorkflowTask{
		{Name: "a", Params: queue.EnqueueParams{Kind: Work{}.Kind(), Args: []byte(`{}`)}},
		{Name: "b", Params: queue.EnqueueParams{Kind: Work{}.Kind(), Args: []byte(`{}`)}, DependsOn: []string{"a"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[Work]) error { return nil })
	var cfg worker.Config
	if err := telemetry.Worker(&cfg, in.opts); err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(jobs, reg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := w.RunOne(ctx, "default"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.RunOne(ctx, "default"); !errors.Is(err, worker.ErrNoJob) {
		t.Fatalf("a third run: %v", err)
	}
	spans := in.spans.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	attrs := map[attribute.Key]attribute.Value{}
	for _, kv := range spans[1].Attributes() {
		attrs[kv.Key] = kv.Value
	}
	if attrs["jobfence.workflow.id"].AsString() != res.ID || attrs["jobfence.workflow.task"].AsString() != "b" {
		t.Fatalf("b's span attributes: %v", spans[1].Attributes())
	}
	deps := attrs["jobfence.workflow.depends_on"].AsInt64Slice()
	var aID int64
	for _, kv := range spans[0].Attributes() {
		if kv.Key == "jobfence.job.id" {
			aID = kv.Value.AsInt64()
		}
	}
	if len(deps) != 1 || deps[0] != res.Tasks["a"] || aID != res.Tasks["a"] {
		t.Fatalf("b depends on %v; a's span has job id %d; want a's job %d", deps, aID, res.Tasks["a"])
	}
}
