package worker_test

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testchild"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// registryChildEnv makes the test binary play the worker that
// TestWorkerRegistry kills.
const registryChildEnv = "JOBFENCE_REGISTRY_CHILD"

// registryBeat is the heartbeat interval of TestWorkerRegistry's workers:
// short, so that a killed one ages out in about a second.
const registryBeat = 100 * time.Millisecond

// workerRow returns the registry's row of worker id, or nil.
func workerRow(t *testing.T, c *pgqueue.Client, id string) *pgqueue.WorkerInfo {
	t.Helper()
	ws, err := c.Workers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.ID == id {
			return &w
		}
	}
	return nil
}

// TestWorkerRegistry: a running worker's row appears at once and follows
// its running and completed jobs; a clean Stop deletes it; the row of a
// killed worker is listed as not live after a few heartbeat intervals and
// is deleted after pgqueue.GoneIntervals of them.
func TestWorkerRegistry(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.NewPool(t, 8), pgqueue.Config{Logger: quietLogger()})
	started, release := make(chan string, 8), make(chan struct{})
	w := startWorker(t, c, gatedHandlers(started, release), worker.Config{
		ID: "live", Queues: map[string]int{"q": 4, "r": 1}, Lease: time.Second, HeartbeatInterval: registryBeat,
		PollInterval: 50 * time.Millisecond,
	})
	testwatch.WaitFor(t, 5*time.Second, "the worker's row", func() bool { return workerRow(t, c, "live") != nil })
	row := workerRow(t, c, "live")
	host, _ := os.Hostname()
	if row.Host != host || row.PID != os.Getpid() || fmt.Sprint(row.Queues) != "[q r]" || !row.Live ||
		row.HeartbeatInterval != registryBeat || time.Since(row.StartedAt) > time.Minute || row.Running != 0 {
		t.Fatalf("row = %+v, want this process's, live, queues [q r], nothing running", row)
	}
	for i := range 2 {
		if _, err := c.Insert(ctx, gatedArgs{Name: fmt.Sprint(i)}, &queue.InsertOpts{Queue: "q"}); err != nil {
			t.Fatal(err)
		}
	}
	<-started
	<-started
	testwatch.WaitFor(t, 5*time.Second, "running = 2 in the row", func() bool { return workerRow(t, c, "live").Running == 2 })
	close(release)
	testwatch.WaitFor(t, 5*time.Second, "completed = 2 in the row", func() bool {
		r := workerRow(t, c, "live")
		return r.Completed == 2 && r.Running == 0
	})

	child := testchild.Start(t, registryChildEnv, "DATABASE_URL="+db.URL)
	if line := child.Next(t); line != "STARTED" {
		t.Fatalf("child says %q, want STARTED (stderr %s)", line, child.Stderr())
	}
	testwatch.WaitFor(t, 5*time.Second, "the child's row", func() bool { r := workerRow(t, c, "killed"); return r != nil && r.Live })
	child.Signal(t, syscall.SIGKILL)
	killed := time.Now()
	testwatch.WaitFor(t, 5*time.Second, "the killed worker's row to be listed as not live", func() bool { return !workerRow(t, c, "killed").Live })
	notLive := time.Since(killed)
	testwatch.WaitFor(t, 10*time.Second, "the killed worker's row to age out", func() bool { return workerRow(t, c, "killed") == nil })
	gone := time.Since(killed)
	t.Logf("killed worker: not live after %s, deleted after %s (heartbeat interval %s)", notLive, gone, registryBeat)
	if gone < (pgqueue.GoneIntervals-1)*registryBeat {
		t.Fatalf("the killed worker's row was deleted %s after the kill, want no sooner than about %d intervals", gone, pgqueue.GoneIntervals)
	}

	stop, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := w.Stop(stop); err != nil {
		t.Fatal(err)
	}
	if ws, err := c.Workers(ctx); err != nil || len(ws) != 0 {
		t.Fatalf("after Stop the registry holds %+v, %v; want nothing", ws, err)
	}
}

// registryChild is the worker TestWorkerRegistry kills: it starts, says
// so, and runs until killed.
func registryChild() int {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[effectArgs]) error { return nil })
	w, err := worker.New(pgqueue.New(pool, pgqueue.Config{Logger: quietLogger()}), reg, worker.Config{
		ID: "killed", Queues: map[string]int{"none": 1}, Lease: time.Second, HeartbeatInterval: registryBeat,
		DisableMaintenance: true, Logger: quietLogger(),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := w.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("STARTED")
	// The test kills it long before; a child left behind ends on its own.
	time.Sleep(testchild.LineTimeout)
	return 1
}
