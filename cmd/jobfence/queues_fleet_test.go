package main

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/jobfencetest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

type fleetNoop struct{}

func (fleetNoop) Kind() string { return "fleet_noop" }

// TestQueuesFleetCLI: set, add, remove and reset store the queue's
// setting for the fleet, say what the workers do, show in list, and a
// running worker follows each within seconds.
func TestQueuesFleetCLI(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	reg := worker.NewRegistry()
	worker.Add(reg, func(context.Context, *worker.Job[fleetNoop]) error { return nil })
	w, err := worker.New(pgqueue.New(db.Pool, pgqueue.Config{}), reg,
		jobfencetest.WorkerConfig(worker.Config{Queues: map[string]int{"default": 4}, FleetQueues: true}))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	})
	follows := func(what string, want map[string]int) {
		t.Helper()
		testwatch.WaitFor(t, 15*time.Second, what, func() bool { return maps.Equal(w.Queues(), want) })
	}
	run := func(want string, args ...string) {
		t.Helper()
		out, errs, code := cli(t, append(append([]string{"queues"}, args...), "--by", "ops", "--database-url", db.URL)...)
		if code != 0 || out != want {
			t.Fatalf("queues %q: exit %d, stderr %q, stdout:\n%s\nwant:\n%s", args, code, errs, out, want)
		}
	}

	run(`queue "default" set to concurrency 2 by ops: every worker that works it follows within about a second; shrinking cancels no running job`+"\n",
		"set", "default", "2")
	follows("the worker to run default at 2", map[string]int{"default": 2})
	run(`queue "bulk" added at concurrency 3 by ops: workers with FleetQueues start it within about a second; those that work it follow the concurrency`+"\n",
		"add", "bulk", "3")
	follows("the worker to start bulk", map[string]int{"default": 2, "bulk": 3})

	out, errs, code := cli(t, "queues", "list", "--database-url", db.URL)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(lines) != 3 {
		t.Fatalf("list: exit %d, stderr %q, stdout:\n%s", code, errs, out)
	}
	if f := strings.Fields(lines[1]); f[0] != "bulk" || f[len(f)-1] != "added:3" {
		t.Errorf("bulk row %q, want it to end in added:3", lines[1])
	}
	if f := strings.Fields(lines[2]); f[0] != "default" || f[len(f)-1] != "set:2" {
		t.Errorf("default row %q, want it to end in set:2", lines[2])
	}

	run(`queue "bulk" removed by ops: every worker stops claiming its jobs within about a second and lets the running ones finish; undo with: jobfence queues reset bulk`+"\n",
		"remove", "bulk")
	follows("the worker to stop bulk", map[string]int{"default": 2})
	run(`queue "default" reset by ops: every worker goes back to its own configuration of it within about a second`+"\n",
		"reset", "default")
	follows("the worker to run default as configured", map[string]int{"default": 4})

	qs, err := pgqueue.New(db.Pool, pgqueue.Config{}).Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 2 || qs[0].Name != "bulk" || qs[0].Run != queue.RunStopped || qs[1].Concurrency != 0 || qs[1].UpdatedBy != "ops" {
		t.Errorf("stored: %+v", qs)
	}
}
