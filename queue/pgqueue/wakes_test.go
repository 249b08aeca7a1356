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
)

// TestCoalescedWakesAnnounceEveryJob: 8 producers insert concurrently
// through one client, whose wake-ups coalesce (one in flight per queue,
// the jobs committed meanwhile riding on the next), in rounds of one
// insert each; a subscriber of the queue's wake-ups (Wake, as a worker
// subscribes) reads the queue's jobs at each wake-up, and each round's
// jobs must all be seen before the next round begins, so no later
// insert's wake-up stands in for a round's own. Only a wake-up that
// begins after each job's commit makes that hold: there is no polling.
// (A worker's claims are not the probe: a claim leaves a job committed
// after later ones to the next claim or poll, see claimpace.go, and
// without polling that would hang the test for reasons of its own.)
func TestCoalescedWakesAnnounceEveryJob(t *testing.T) {
	db := pgtest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	app := "coalesce-" + db.Schema
	c := pgqueue.New(pgtest.AppPool(t, db, app, 4), pgqueue.Config{})
	producer := pgqueue.New(pgtest.AppPool(t, db, app+"-producer", 8), pgqueue.Config{})
	t.Cleanup(producer.Close)
	q := "coalesce-" + db.Schema

	const producers, rounds = 8, 40
	var seen atomic.Int64
	wake, err := c.Wake(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	testwatch.WaitFor(t, time.Minute, "the subscriber's LISTEN on the insert channel", func() bool {
		var n int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query = 'LISTEN "jobfence_insert"'`, app).Scan(&n)
		return err == nil && n == 1
	})
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		for {
			select {
			case <-ctx.Done():
				return
			case <-wake:
			}
			var n int64
			if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE queue = $1`, q).Scan(&n); err == nil {
				seen.Store(n)
			}
		}
	}()
	defer func() { cancel(); <-probed }()

	before := pgqueue.WakesSent(producer)
	for r := range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, producers)
		for range producers {
			wg.Go(func() {
				if _, err := producer.Enqueue(ctx, queue.EnqueueParams{Queue: q, Kind: "k"}); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		testwatch.WaitFor(t, time.Minute, fmt.Sprintf("a wake-up that shows round %d's jobs", r), func() bool {
			return seen.Load() == int64((r+1)*producers)
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
