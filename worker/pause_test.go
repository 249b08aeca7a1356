package worker_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/logbuf"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

type gatedArgs struct {
	Name string `json:"name"`
}

func (gatedArgs) Kind() string { return "gated" }

// gatedHandlers registers a handler that reports each job it starts on
// started and then waits until release is closed.
func gatedHandlers(started chan<- string, release <-chan struct{}) *worker.Registry {
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[gatedArgs]) error {
		started <- job.Args.Name
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	return reg
}

// pauseLogs counts the worker's pause and resume log lines for queue q.
func pauseLogs(logs *logbuf.Buffer, q string) (paused, resumed int) {
	for _, l := range strings.Split(logs.String(), "\n") {
		if !strings.Contains(l, "queue="+q) {
			continue
		}
		if strings.Contains(l, "queue paused") {
			paused++
		}
		if strings.Contains(l, "queue resumed") {
			resumed++
		}
	}
	return paused, resumed
}

// TestPauseQueue: pausing a queue stops a running worker claiming from it
// within a second, by NOTIFY and, with PollOnly, by polling; see
// checkPause. TestPgBouncerPausePollOnly does the same through PgBouncer.
func TestPauseQueue(t *testing.T) {
	for _, tt := range []struct {
		name   string
		cfg    pgqueue.Config
		within time.Duration
	}{
		{"notify", pgqueue.Config{}, time.Second},
		{"poll", pgqueue.Config{PollOnly: true}, pollPauseBound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			db := pgtest.New(t)
			tt.cfg.Logger = quietLogger()
			checkPause(t, pgqueue.New(db.NewPool(t, 8), tt.cfg), tt.within)
		})
	}
}

// pollPauseBound is how soon a poll-only worker must see a pause: a poll
// every PausePollInterval (1s), and the query's round trip.
const pollPauseBound = pgqueue.DefaultPausePollInterval + 500*time.Millisecond

// checkPause runs a worker on c and pauses its queue q while a job of q
// runs: the worker must stop claiming from q within the bound, let the
// running job finish, keep running its other queue, and run q's waiting
// job within the bound of the resume. It logs the pause and the resume
// once each, however often they are repeated.
func checkPause(t *testing.T, c *pgqueue.Client, within time.Duration) {
	t.Helper()
	ctx := context.Background()
	logs := &logbuf.Buffer{}
	started, release := make(chan string, 8), make(chan struct{})
	startWorker(t, c, gatedHandlers(started, release), worker.Config{
		Queues:       map[string]int{"q": 4, "other": 1},
		PollInterval: 100 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(logs, nil)),
	})
	enqueue := func(q, name string) int64 {
		t.Helper()
		res, err := c.Insert(ctx, gatedArgs{Name: name}, &queue.InsertOpts{Queue: q})
		if err != nil {
			t.Fatal(err)
		}
		return res.ID
	}
	a := enqueue("q", "a")
	if got := <-started; got != "a" {
		t.Fatalf("started %q, want a", got)
	}

	pausedAt := time.Now()
	if err := c.PauseQueue(ctx, "q", "test"); err != nil {
		t.Fatal(err)
	}
	testwatch.WaitFor(t, 10*time.Second, "the worker to log the pause", func() bool { p, _ := pauseLogs(logs, "q"); return p > 0 })
	took := time.Since(pausedAt)
	t.Logf("pause reached the worker after %s", took)
	if took > within {
		t.Fatalf("pause reached the worker after %s, want within %s", took, within)
	}
	if err := c.PauseQueue(ctx, "q", "someone else"); err != nil {
		t.Fatal(err)
	}

	b := enqueue("q", "b")
	enqueue("other", "o")
	if got := <-started; got != "o" {
		t.Fatalf("started %q while q is paused, want o of the other queue", got)
	}
	// Several claim polls of q go by.
	time.Sleep(500 * time.Millisecond)
	if j := stateOf(t, c, b); j.State != queue.StateAvailable {
		t.Fatalf("job b of the paused queue is %s, want available", j.State)
	}
	close(release)
	testwatch.WaitFor(t, 10*time.Second, "the running job a to complete while q is paused", func() bool {
		return stateOf(t, c, a).State == queue.StateCompleted
	})
	if j := stateOf(t, c, b); j.State != queue.StateAvailable {
		t.Fatalf("job b of the paused queue is %s, want available", j.State)
	}

	resumedAt := time.Now()
	if err := c.ResumeQueue(ctx, "q", "test"); err != nil {
		t.Fatal(err)
	}
	testwatch.WaitFor(t, 10*time.Second, "job b to run after the resume", func() bool {
		return stateOf(t, c, b).State == queue.StateCompleted
	})
	took = time.Since(resumedAt)
	t.Logf("resume ran the waiting job after %s", took)
	if took > within {
		t.Fatalf("resume ran the waiting job after %s, want within %s", took, within)
	}
	if p, r := pauseLogs(logs, "q"); p != 1 || r != 1 {
		t.Fatalf("the worker logged %d pauses and %d resumes of q, want one each; logs:\n%s", p, r, logs)
	}
	if p, r := pauseLogs(logs, "other"); p != 0 || r != 0 {
		t.Fatalf("the worker logged %d pauses and %d resumes of the other queue, want none; logs:\n%s", p, r, logs)
	}
}

// TestStartPaused: a worker started while its queue is paused claims
// nothing from it until it is resumed.
func TestStartPaused(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.NewPool(t, 8), pgqueue.Config{Logger: quietLogger()})
	if err := c.PauseQueue(ctx, queue.DefaultQueue, "test"); err != nil {
		t.Fatal(err)
	}
	res, err := c.Insert(ctx, gatedArgs{Name: "x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan string, 1), make(chan struct{})
	close(release)
	startWorker(t, c, gatedHandlers(started, release), worker.Config{PollInterval: 50 * time.Millisecond})
	time.Sleep(500 * time.Millisecond)
	if j := stateOf(t, c, res.ID); j.State != queue.StateAvailable {
		t.Fatalf("job of the paused queue is %s after the worker started, want available", j.State)
	}
	if err := c.ResumeQueue(ctx, queue.DefaultQueue, "test"); err != nil {
		t.Fatal(err)
	}
	testwatch.WaitFor(t, 10*time.Second, "the job to run after the resume", func() bool {
		return stateOf(t, c, res.ID).State == queue.StateCompleted
	})
}

// TestPauseFleet: one pause stops every worker of the fleet, each with a
// client and LISTEN connection of its own.
func TestPauseFleet(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	admin := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	var logs []*logbuf.Buffer
	started, release := make(chan string, 64), make(chan struct{})
	defer close(release)
	for range 3 {
		l := &logbuf.Buffer{}
		logs = append(logs, l)
		startWorker(t, pgqueue.New(db.NewPool(t, 4), pgqueue.Config{Logger: quietLogger()}), gatedHandlers(started, release),
			worker.Config{PollInterval: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(l, nil))})
	}
	at := time.Now()
	if err := admin.PauseQueue(ctx, queue.DefaultQueue, "test"); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, l := range logs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(10 * time.Second)
			for p, _ := pauseLogs(l, queue.DefaultQueue); p == 0 && time.Now().Before(deadline); p, _ = pauseLogs(l, queue.DefaultQueue) {
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	took := time.Since(at)
	t.Logf("pause reached all 3 workers after %s", took)
	for i, l := range logs {
		if p, _ := pauseLogs(l, queue.DefaultQueue); p != 1 {
			t.Fatalf("worker %d logged %d pauses, want 1", i, p)
		}
	}
	if took > time.Second {
		t.Fatalf("pause reached every worker after %s, want within a second", took)
	}
	for i := range 10 {
		if _, err := admin.Insert(ctx, gatedArgs{Name: "x"}, nil); err != nil {
			t.Fatal(err, i)
		}
	}
	time.Sleep(300 * time.Millisecond)
	if n, err := admin.Counts(ctx, queue.DefaultQueue); err != nil || n[queue.StateAvailable] != 10 {
		t.Fatalf("counts with the queue paused: %v, %v; want 10 available", n, err)
	}
}

// TestPauseAfterLostListen: when the worker's LISTEN connection for pauses
// is cut, a pause made meanwhile still reaches it within about a second:
// the lost connection switches it to polling, and the new LISTEN re-reads
// the paused set, since notifications sent in between are lost.
func TestPauseAfterLostListen(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	app := "pause-" + db.Schema
	clientLogs, logs := &logbuf.Buffer{}, &logbuf.Buffer{}
	c := pgqueue.New(pgtest.AppPool(t, db, app, 4), pgqueue.Config{Logger: slog.New(slog.NewTextHandler(clientLogs, nil))})
	started, release := make(chan string, 1), make(chan struct{})
	defer close(release)
	startWorker(t, c, gatedHandlers(started, release), worker.Config{Logger: slog.New(slog.NewTextHandler(logs, nil))})

	// The worker's one LISTEN connection, which pauses share with its
	// wake-ups and cancellations.
	pids := pgtest.Listeners(t, db, app)
	if len(pids) != 1 {
		t.Fatalf("LISTEN connections %v, want 1", pids)
	}
	pid := pids[0]
	var killed bool
	if err := db.Pool.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate the LISTEN connection: %v, %v", killed, err)
	}
	// Pause once the old connection is gone, while the worker waits to
	// reconnect (100ms): no notification can reach it then.
	testwatch.WaitFor(t, 10*time.Second, "the LISTEN connection to end", func() bool {
		var n int
		return db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&n) == nil && n == 0
	})
	at := time.Now()
	if err := c.PauseQueue(ctx, queue.DefaultQueue, "test"); err != nil {
		t.Fatal(err)
	}
	testwatch.WaitFor(t, 10*time.Second, "the worker to log the pause", func() bool { p, _ := pauseLogs(logs, queue.DefaultQueue); return p == 1 })
	took := time.Since(at)
	t.Logf("pause reached the worker %s after its LISTEN connection was cut", took)
	if took > pollPauseBound {
		t.Fatalf("pause reached the worker after %s, want within %s", took, pollPauseBound)
	}
	testwatch.WaitFor(t, 10*time.Second, "the lost LISTEN logged", func() bool {
		for _, l := range strings.Split(clientLogs.String(), "\n") {
			if strings.Contains(l, "LISTEN connection lost") && strings.Contains(l, "jobfence_pause") {
				return true
			}
		}
		return false
	})
	// A new LISTEN is in place, and a resume comes by NOTIFY again. The
	// channels are LISTENed in order, the signals' after the pauses': the
	// connection's last statement is either once the pauses' is in place.
	testwatch.WaitFor(t, 10*time.Second, "a new LISTEN for pauses", func() bool {
		var n int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND pid <> $2
            AND query IN ('LISTEN "jobfence_pause"', 'LISTEN "jobfence_signal"')`, app, pid).Scan(&n)
		return err == nil && n == 1
	})
	at = time.Now()
	if err := c.ResumeQueue(ctx, queue.DefaultQueue, "test"); err != nil {
		t.Fatal(err)
	}
	testwatch.WaitFor(t, 10*time.Second, "the worker to log the resume", func() bool { _, r := pauseLogs(logs, queue.DefaultQueue); return r == 1 })
	t.Logf("resume reached the worker after %s", time.Since(at))
}
