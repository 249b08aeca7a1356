package pgqueue_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/logbuf"
	"github.com/jobfence/jobfence/internal/netfault"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

type wakeArgs struct {
	N int `json:"n"`
}

func (wakeArgs) Kind() string { return "wake" }

// TestCoalescedWakesStartEveryJob: 8 producers insert concurrently through
// one client, whose wake-ups coalesce (one in flight per queue, the
// jobs committed meanwhile riding on the next), and a worker that polls
// once an hour starts every job: only wake-ups sent after each job's
// commit can do that. A job whose only wake-up began before its commit
// would wait for the poll, far beyond the test's bounds.
func TestCoalescedWakesStartEveryJob(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	app := "coalesce-" + db.Schema
	producer := pgqueue.New(pgtest.AppPool(t, db, app+"-producer", 8), pgqueue.Config{})
	t.Cleanup(producer.Close)
	q := "coalesce-" + db.Schema

	const producers, rounds = 8, 40
	var started atomic.Int64
	seen := make([]atomic.Bool, producers*rounds)
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[wakeArgs]) error {
		if !seen[job.Args.N].Swap(true) {
			started.Add(1)
		}
		return nil
	})
	w, err := worker.New(pgqueue.New(pgtest.AppPool(t, db, app, 8), pgqueue.Config{}), reg, worker.Config{
		Queues: map[string]int{q: 16}, PollInterval: time.Hour, Lease: time.Hour,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := w.Stop(stopCtx); err != nil {
			t.Error(err)
		}
	})
	// The listener LISTENs on its channels in their order, the insert
	// channel after the cancel channel and before the pause channel: once
	// it shows either, wake-ups reach the worker.
	testwatch.WaitFor(t, time.Minute, "the worker's LISTEN on the insert channel", func() bool {
		var n int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query IN ('LISTEN "jobfence_insert"', 'LISTEN "jobfence_pause"')`, app).Scan(&n)
		return err == nil && n == 1
	})

	// Rounds of one insert per producer, all at once; each round's jobs
	// must start before the next round begins, so no later insert's
	// wake-up stands in for a round's own.
	before := pgqueue.WakesSent(producer)
	for r := range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, producers)
		for p := range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := producer.Insert(ctx, wakeArgs{N: r*producers + p}, &queue.InsertOpts{Queue: q}); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		testwatch.WaitFor(t, time.Minute, fmt.Sprintf("round %d's jobs to start (polling once an hour)", r), func() bool {
			return started.Load() == int64((r+1)*producers)
		})
	}
	testwatch.WaitFor(t, time.Minute, "the producer's last wake-up to be done", func() bool {
		return pgqueue.WakesInFlight(producer) == 0
	})
	t.Logf("%d jobs, %d wake-ups", producers*rounds, pgqueue.WakesSent(producer)-before)
}

// TestWakeRidesOnTheNext: while a wake-up of a queue is in flight from
// a client, its inserts send none; once it is done, exactly one more
// wake-up goes out for them, and it reaches the workers. Dropping that
// follow-up leaves the jobs unannounced, and the test fails.
func TestWakeRidesOnTheNext(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	q := "ride-" + db.Schema
	heard := listen(t, db.Pool, "jobfence_insert")

	release := pgqueue.HoldWake(c, q)
	before := pgqueue.WakesSent(c)
	enqueueN(t, c, queue.EnqueueParams{Queue: q, Kind: "k"}, 5)
	// A job with a unique key takes the two round trips' path.
	if _, err := c.Enqueue(ctx, queue.EnqueueParams{Queue: q, Kind: "k", UniqueKey: "u-" + db.Schema}); err != nil {
		t.Fatal(err)
	}
	if n := pgqueue.WakesSent(c) - before; n != 0 {
		t.Fatalf("%d wake-ups sent while one was in flight, want 0", n)
	}
	if n := pgqueue.WakesInFlight(c); n != 1 {
		t.Fatalf("%d queues with a wake-up in flight, want 1", n)
	}
	release()
	if !heard(q) {
		t.Fatal("no wake-up of the queue after the one in flight was done: the jobs that rode on it are unannounced")
	}
	testwatch.WaitFor(t, time.Minute, "the follow-up wake-up to be done", func() bool {
		return pgqueue.WakesInFlight(c) == 0
	})
	if n := pgqueue.WakesSent(c) - before; n != 1 {
		t.Fatalf("%d wake-ups sent for the six jobs, want 1", n)
	}
	if jobs := claim(t, c, q, 10, time.Minute); len(jobs) != 6 {
		t.Fatalf("claimed %d jobs, want 6", len(jobs))
	}

	// With nothing in flight, an insert sends its own wake-up again.
	enqueueN(t, c, queue.EnqueueParams{Queue: q, Kind: "k"}, 1)
	if !heard(q) {
		t.Fatal("no wake-up of an insert with nothing in flight")
	}
	if n := pgqueue.WakesSent(c) - before; n != 2 {
		t.Fatalf("%d wake-ups sent, want 2", n)
	}
}

// riding is a client whose replies a proxy can hold, with an insert
// riding on a wake-up held in flight: the insert has committed, and its
// reply is held.
type riding struct {
	c, a    *pgqueue.Client
	db      *pgtest.DB
	proxy   *netfault.Proxy
	q       string
	heard   func(string) bool
	release func()
	cancel  context.CancelFunc
	done    chan error
}

// startRiding starts a riding insert of queue prefix+schema.
func startRiding(t *testing.T, prefix string) *riding {
	t.Helper()
	c, db := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	r := &riding{c: c, db: db, q: prefix + db.Schema, cancel: cancel, done: make(chan error, 1)}
	r.proxy = netfault.New(t, netfault.TargetOf(t, db.URL), netfault.Forward)
	r.a = pgqueue.New(db.NewPoolVia(t, r.proxy.Addr(), 2), pgqueue.Config{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(r.a.Close)
	// Connected, and its statements prepared, before its replies stall.
	enqueueN(t, r.a, queue.EnqueueParams{Queue: r.q, Kind: "k"}, 1)
	if jobs := claim(t, c, r.q, 10, time.Minute); len(jobs) != 1 {
		t.Fatalf("claimed %d jobs, want the first one", len(jobs))
	}
	testwatch.WaitFor(t, time.Minute, "the first wake-up to be done", func() bool {
		return pgqueue.WakesInFlight(r.a) == 0
	})
	r.heard = listen(t, db.Pool, "jobfence_insert")

	r.release = pgqueue.HoldWake(r.a, r.q)
	r.proxy.SetMode(netfault.StallReplies)
	go func() {
		_, err := r.a.Enqueue(ctx, queue.EnqueueParams{Queue: r.q, Kind: "k"})
		r.done <- err
	}()
	testwatch.WaitFor(t, time.Minute, "the riding job to commit", func() bool {
		var n int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE queue = $1 AND state = 'available'`, r.q).Scan(&n)
		return err == nil && n == 1
	})
	return r
}

// announced fails t unless the riding job's queue is woken and the job
// claimed.
func (r *riding) announced(t *testing.T, why string) {
	t.Helper()
	if !r.heard(r.q) {
		t.Fatal(why)
	}
	if jobs := claim(t, r.c, r.q, 10, time.Minute); len(jobs) != 1 {
		t.Fatalf("claimed %d jobs, want the riding one", len(jobs))
	}
}

// TestWakeDoneBeforeTheRidersCommit: an insert that sent no wake-up
// because one was in flight, and whose reply comes back after that one
// is done (nobody is left to send the next), sends a wake-up itself
// after its commit. Its client's replies are held while the other
// wake-up ends, as a slow network's are.
func TestWakeDoneBeforeTheRidersCommit(t *testing.T) {
	r := startRiding(t, "late-")
	r.release()
	if n := pgqueue.WakesInFlight(r.a); n != 0 {
		t.Fatalf("%d queues with a wake-up in flight after the held one was done, want 0", n)
	}
	r.proxy.SetMode(netfault.Forward)
	if err := <-r.done; err != nil {
		t.Fatal(err)
	}
	r.announced(t, "no wake-up after the job's commit: the one it rode on was done before its reply came")
}

// TestCloseStopsWakeSenders: Close stops a background wake-up that cannot
// get its reply (cancelled, not left to its own timeout), returns once
// no sender runs, and logs that the wake-up failed; the closed client
// still inserts, each insert with a wake-up of its own.
func TestCloseStopsWakeSenders(t *testing.T) {
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	proxy := netfault.New(t, netfault.TargetOf(t, db.URL), netfault.Forward)
	logs := &logbuf.Buffer{}
	a := pgqueue.New(db.NewPoolVia(t, proxy.Addr(), 2), pgqueue.Config{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	q := "close-" + db.Schema

	release := pgqueue.HoldWake(a, q)
	enqueueN(t, a, queue.EnqueueParams{Queue: q, Kind: "k"}, 1)
	proxy.SetMode(netfault.StallReplies)
	release()
	if n := pgqueue.WakeSenders(a); n != 1 {
		t.Fatalf("%d background senders, want the follow-up's", n)
	}
	closed := make(chan struct{})
	go func() {
		a.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("Close did not return: the background sender was not stopped")
	}
	if n := pgqueue.WakeSenders(a); n != 0 {
		t.Fatalf("%d background senders after Close, want 0", n)
	}
	if got := logs.String(); !strings.Contains(got, "waking their workers failed") || !strings.Contains(got, "context canceled") {
		t.Fatalf("logs do not report the wake-up that Close cancelled:\n%s", got)
	}

	proxy.SetMode(netfault.Forward)
	heard := listen(t, db.Pool, "jobfence_insert")
	enqueueN(t, a, queue.EnqueueParams{Queue: q, Kind: "k"}, 1)
	if !heard(q) {
		t.Fatal("no wake-up from an insert of the closed client")
	}
}

// TestRiderWithoutItsReplyWakes: an insert that rode on another's
// wake-up and got no reply (its context ended while the reply was held)
// may have committed, and did here: it marks its queue all the same, so
// the wake-up that follows the one in flight announces its job.
func TestRiderWithoutItsReplyWakes(t *testing.T) {
	r := startRiding(t, "noreply-")
	r.cancel()
	if err := <-r.done; err == nil {
		t.Fatal("the enqueue whose reply was held returned no error after its context ended")
	}
	r.proxy.SetMode(netfault.Forward)
	r.release()
	r.announced(t, "no wake-up for a job whose insert committed but whose reply never came")
}
