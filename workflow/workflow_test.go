package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/kafkaqueue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
	"github.com/jobfence/jobfence/workflow"
)

func TestMain(m *testing.M) {
	if os.Getenv(zombieChildEnv) != "" {
		// Re-executed by TestZombieTaskReleasesNothing as the worker that freezes.
		os.Exit(zombieChild())
	}
	pgtest.Main(m)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func start(t *testing.T, c *pgqueue.Client, reg *worker.Registry, cfg worker.Config) *worker.Worker {
	t.Helper()
	cfg.Logger = quiet()
	w, err := worker.New(c, reg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		w.Stop(ctx)
	})
	return w
}

func waitDone(t *testing.T, c *pgqueue.Client, id string) *pgqueue.WorkflowInfo {
	t.Helper()
	var w *pgqueue.WorkflowInfo
	testwatch.WaitFor(t, time.Minute, "the workflow's tasks all ended", func() bool {
		var err error
		if w, err = c.Workflow(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		return w.Done()
	})
	return w
}

// TestOrderWorkflow: the order workflow runs through a real worker; each
// dependent reads its dependencies' outputs, typed; the workflow is
// inserted in the caller's transaction and exists only once it commits.
func TestOrderWorkflow(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, effectsTable); err != nil {
		t.Fatal(err)
	}
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quiet()})
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := workflow.InsertTx(ctx, c, tx, orderWorkflow("o-1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Workflow(ctx, res.ID); !errors.Is(err, workflow.ErrNotFound) {
		t.Fatalf("before commit, Workflow = %v, want ErrNotFound", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	reg := worker.NewRegistry()
	addOrderHandlers(reg, "w", nil)
	start(t, c, reg, workerConfig(30*time.Second))
	w := waitDone(t, c, res.ID)
	if w.Counts[queue.StateCompleted] != 4 {
		t.Fatalf("counts = %v, want 4 completed", w.Counts)
	}
	var charge *pgqueue.Task
	for _, tk := range w.Tasks {
		if tk.TaskName == "charge" {
			charge = tk
		}
	}
	want := fmt.Sprintf("w-%d", charge.Fence)
	effects, err := effectsOf(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	for task, seen := range map[string]string{"reserve": want, "receipt": want, "ship": "reserve saw " + want + " / receipt saw " + want} {
		if got := effects[task]; len(got) != 1 || got[0] != seen {
			t.Fatalf("%s saw %q, want once %q", task, got, seen)
		}
	}
}

type fanArgs struct {
	I int `json:"i"`
}

func (fanArgs) Kind() string { return "fan" }

type sumArgs struct {
	N int `json:"n"`
}

func (sumArgs) Kind() string { return "sum" }

// TestFanOutFanIn: one task fans out to 50, which fan in to one that
// reads all their outputs; a task spawned while the workflow runs
// depends on the fan-in.
func TestFanOutFanIn(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quiet()})
	const n = 50
	wf := workflow.New("fan").Add("root", fanArgs{I: -1}, nil)
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("part-%d", i)
		wf.Add(names[i], fanArgs{I: i}, &workflow.TaskOpts{DependsOn: []string{"root"}})
	}
	wf.Add("sum", sumArgs{N: n}, &workflow.TaskOpts{DependsOn: names})
	res, err := workflow.Insert(ctx, c, wf)
	if err != nil {
		t.Fatal(err)
	}
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[fanArgs]) error {
		return worker.RecordOutput(ctx, job.Args.I*job.Args.I)
	})
	sums := make(chan int, 2)
	worker.Add(reg, func(ctx context.Context, job *worker.Job[sumArgs]) error {
		if job.TaskName != "sum" {
			// The spawned task reads the sum.
			s, err := workflow.Output[int](ctx, "sum")
			sums <- s
			return err
		}
		total := 0
		for i := range job.Args.N {
			v, err := workflow.Output[int](ctx, fmt.Sprintf("part-%d", i))
			if err != nil {
				return err
			}
			total += v
		}
		if err := worker.RecordOutput(ctx, total); err != nil {
			return err
		}
		// A task added while the workflow runs, after this one.
		id, err := workflow.ID(ctx)
		if err != nil {
			return err
		}
		_, err = workflow.Insert(ctx, c, workflow.Append(id).Add("report", sumArgs{}, &workflow.TaskOpts{DependsOn: []string{"sum"}}))
		return err
	})
	start(t, c, reg, workerConfig(30*time.Second))
	testwatch.WaitFor(t, time.Minute, "the spawned task read the sum", func() bool { return len(sums) == 1 })
	want := 0
	for i := range n {
		want += i * i
	}
	if got := <-sums; got != want {
		t.Fatalf("the spawned task read %d, want %d", got, want)
	}
	w := waitDone(t, c, res.ID)
	if w.Counts[queue.StateCompleted] != n+3 {
		t.Fatalf("counts = %v, want %d completed", w.Counts, n+3)
	}
}

// TestOutputOutsideAWorkflow: Output and ID refuse a context that is not
// a workflow task's handler, and Insert a backend without workflows.
func TestOutputOutsideAWorkflow(t *testing.T) {
	if _, err := workflow.Output[int](context.Background(), "x"); !errors.Is(err, workflow.ErrNotATask) {
		t.Fatalf("Output = %v", err)
	}
	if _, err := workflow.ID(context.Background()); !errors.Is(err, workflow.ErrNotATask) {
		t.Fatalf("ID = %v", err)
	}
	_, err := workflow.Insert(context.Background(), noWorkflows{}, orderWorkflow("x"))
	if !errors.Is(err, workflow.ErrUnsupported) || !strings.Contains(err.Error(), "workflows need the PostgreSQL backend") {
		t.Fatalf("Insert on a backend without workflows = %v", err)
	}
	wf := workflow.New("bad").Add("a", badArgs{F: func() {}}, nil)
	if _, err := wf.Params(); err == nil || !strings.Contains(err.Error(), `workflow: task "a": jobfence: encode args of kind "bad"`) {
		t.Fatalf("Params of args that do not encode = %v", err)
	}
}

type badArgs struct{ F func() }

func (badArgs) Kind() string { return "bad" }

type noWorkflows struct{}

func (noWorkflows) InsertWorkflow(context.Context, queue.WorkflowParams) (queue.WorkflowResult, error) {
	return queue.WorkflowResult{}, fmt.Errorf("test backend: %w", queue.ErrWorkflowsUnsupported)
}

// TestKafkaRefusesWorkflows: a Kafka client refuses a workflow with an
// error that says why and what to use.
func TestKafkaRefusesWorkflows(t *testing.T) {
	var c *kafkaqueue.Client
	_, err := workflow.Insert(context.Background(), c, orderWorkflow("k"))
	want := `kafkaqueue: workflow "order k" (4 tasks): jobfence: workflows need the PostgreSQL backend (pgqueue); the Kafka backend runs independent jobs only: insert workflows through pgqueue.Client`
	if !errors.Is(err, workflow.ErrUnsupported) || err.Error() != want {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
}
