package telemetry_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/telemetry"
	"github.com/jobfence/jobfence/worker"
)

// TestWorkflowTaskSpans: a workflow task's attempt span names its
// workflow, its task and the job IDs of the tasks it depends on, which
// are the jobfence.job.id of their attempts' spans, and links to the
// spans of the attempts that completed them (stored with each fenced
// completion), read with the OpenTelemetry SDK's in-memory exporter.
func TestWorkflowTaskSpans(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	in := newInstruments(t)
	jobs := pgqueue.New(db.Pool, pgqueue.Config{})
	res, err := jobs.InsertWorkflow(ctx, queue.WorkflowParams{Name: "traced", Tasks: []queue.WorkflowTask{
		{Name: "a", Params: queue.EnqueueParams{Kind: Work{}.Kind(), Args: []byte(`{}`)}},
		{Name: "c", Params: queue.EnqueueParams{Kind: Work{}.Kind(), Args: []byte(`{}`)}},
		{Name: "b", Params: queue.EnqueueParams{Kind: Work{}.Kind(), Args: []byte(`{}`)}, DependsOn: []string{"a", "c"}},
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
	for range 3 {
		if _, err := w.RunOne(ctx, "default"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.RunOne(ctx, "default"); !errors.Is(err, worker.ErrNoJob) {
		t.Fatalf("a third run: %v", err)
	}
	spans := in.spans.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3", len(spans))
	}
	byTask := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		for _, kv := range s.Attributes() {
			if kv.Key == "jobfence.workflow.task" {
				byTask[kv.Value.AsString()] = s
			}
		}
	}
	b := byTask["b"]
	if b == nil || byTask["a"] == nil || byTask["c"] == nil {
		t.Fatalf("spans by task: %v", byTask)
	}
	attrs := map[attribute.Key]attribute.Value{}
	for _, kv := range b.Attributes() {
		attrs[kv.Key] = kv.Value
	}
	if attrs["jobfence.workflow.id"].AsString() != res.ID {
		t.Fatalf("b's span attributes: %v", b.Attributes())
	}
	deps := attrs["jobfence.workflow.depends_on"].AsInt64Slice()
	var aID int64
	for _, kv := range byTask["a"].Attributes() {
		if kv.Key == "jobfence.job.id" {
			aID = kv.Value.AsInt64()
		}
	}
	if len(deps) != 2 || deps[0] != res.Tasks["a"] || deps[1] != res.Tasks["c"] || aID != res.Tasks["a"] {
		t.Fatalf("b depends on %v; a's span has job id %d; want a's job %d and c's %d", deps, aID, res.Tasks["a"], res.Tasks["c"])
	}
	// b's span links to a's and c's, in their job IDs' order, besides
	// the link to its enqueue (none here: the insert was not traced).
	var linked []trace.SpanContext
	for _, l := range b.Links() {
		linked = append(linked, l.SpanContext)
	}
	want := []trace.SpanContext{byTask["a"].SpanContext(), byTask["c"].SpanContext()}
	same := func(a, b trace.SpanContext) bool { return a.TraceID() == b.TraceID() && a.SpanID() == b.SpanID() }
	if len(linked) != 2 || !same(linked[0], want[0]) || !same(linked[1], want[1]) {
		t.Fatalf("b's span links to %v, want a's and c's spans %v", linked, want)
	}
	if len(byTask["a"].Links()) != 0 {
		t.Fatalf("a's span links to %v, want nothing (it depends on no task)", byTask["a"].Links())
	}
}
