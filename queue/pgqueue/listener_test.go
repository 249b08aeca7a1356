package pgqueue_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/logbuf"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// untilListeners polls app's LISTEN connections until cond holds of their
// pids, for at most 10s, and returns them.
func untilListeners(t *testing.T, db *pgtest.DB, app, what string, cond func([]int) bool) []int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := pgtest.Listeners(t, db, app)
		if cond(pids) {
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: LISTEN connections %v", what, pids)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func lastStatement(t *testing.T, db *pgtest.DB, pid int) string {
	t.Helper()
	var q string
	if err := db.Pool.QueryRow(context.Background(), `SELECT query FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&q); err != nil {
		t.Fatal(err)
	}
	return q
}

// TestListenerLifecycle: a client opens its LISTEN connection with the
// first subscription, shares it among the next ones, UNLISTENs a channel
// when its last subscription ends, closes the connection when the last of
// all ends, and opens a new one for a later subscription.
func TestListenerLifecycle(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	app := "listener-" + db.Schema
	c := pgqueue.New(pgtest.AppPool(t, db, app, 4), pgqueue.Config{})
	q := "lifecycle-" + db.Schema
	if p := pgtest.Listeners(t, db, app); len(p) != 0 {
		t.Fatalf("LISTEN connections before any subscription: %v", p)
	}
	wakeCtx, endWake := context.WithCancel(ctx)
	defer endWake()
	if _, err := c.Wake(wakeCtx, q); err != nil {
		t.Fatal(err)
	}
	cancelCtx, endCancel := context.WithCancel(ctx)
	defer endCancel()
	if _, err := c.Cancelled(cancelCtx); err != nil {
		t.Fatal(err)
	}
	pauseCtx, endPause := context.WithCancel(ctx)
	defer endPause()
	if _, err := c.WatchPaused(pauseCtx, []string{q}); err != nil {
		t.Fatal(err)
	}
	pids := pgtest.Listeners(t, db, app)
	if len(pids) != 1 {
		t.Fatalf("LISTEN connections of three subscriptions: %v, want 1", pids)
	}
	if got, want := lastStatement(t, db, pids[0]), `LISTEN "jobfence_pause"`; got != want {
		t.Fatalf("the LISTEN connection's last statement is %q, want %q", got, want)
	}

	endWake()
	untilListeners(t, db, app, `UNLISTEN "jobfence_insert"`, func(p []int) bool {
		return slices.Equal(p, pids) && lastStatement(t, db, pids[0]) == `UNLISTEN "jobfence_insert"`
	})
	endCancel()
	endPause()
	untilListeners(t, db, app, "the LISTEN connection to close", func(p []int) bool { return len(p) == 0 })

	laterCtx, endLater := context.WithCancel(ctx)
	defer endLater()
	wake, err := c.Wake(laterCtx, q)
	if err != nil {
		t.Fatal(err)
	}
	again := pgtest.Listeners(t, db, app)
	if len(again) != 1 || again[0] == pids[0] {
		t.Fatalf("LISTEN connections of a new subscription: %v, want a new one (the last was %d)", again, pids[0])
	}
	if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: q}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up through the new LISTEN connection")
	}
}

// TestListenerSlowCancelReader: a Cancelled channel that nobody reads
// holds up neither wake-ups nor pauses on the shared connection. The
// cancellations it cannot hold are dropped and logged (those jobs stop at
// their next heartbeat), and delivery resumes once it is read.
func TestListenerSlowCancelReader(t *testing.T) {
	db := pgtest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &logbuf.Buffer{}
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	q := "slow-" + db.Schema
	cancelled, err := c.Cancelled(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wake, err := c.Wake(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	paused, err := c.WatchPaused(ctx, []string{q})
	if err != nil {
		t.Fatal(err)
	}
	if p := <-paused; len(p) != 0 {
		t.Fatalf("paused set at start %v, want none", p)
	}
	const sent = 3000
	if _, err := db.Pool.Exec(ctx, `SELECT pg_notify('jobfence_cancel', i || ':1') FROM generate_series(1, $1::int) i`, sent); err != nil {
		t.Fatal(err)
	}
	// Sent after the cancellations on the same connection, so delivered
	// after them.
	if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: q}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up behind the unread cancellations")
	}
	if err := c.PauseQueue(ctx, q, "test"); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-paused:
		if !slices.Equal(p, []string{q}) {
			t.Fatalf("paused set %v, want [%s]", p, q)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no pause behind the unread cancellations")
	}
	if n := len(cancelled); n != cap(cancelled) || n >= sent {
		t.Fatalf("Cancelled holds %d leases of %d sent (capacity %d), want it full", n, sent, cap(cancelled))
	}
	if !strings.Contains(logs.String(), "cancel notifications are not read; dropping them") {
		t.Fatalf("the dropped cancellations are not logged:\n%s", logs.String())
	}
	for range cap(cancelled) {
		<-cancelled
	}
	want := queue.Lease{ID: sent + 1, Fence: 7}
	if _, err := db.Pool.Exec(ctx, `SELECT pg_notify('jobfence_cancel', $1)`, "3001:7"); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-cancelled:
		if got != want {
			t.Fatalf("cancel notification %+v, want %+v", got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no cancel notification once the channel was read")
	}
	// Logged once the lease is in the channel, so perhaps just after.
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), "cancel notifications delivered again"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the end of dropping is not logged:\n%s", logs.String())
		}
	}
}

// TestListenURLUnreachable: a ListenURL that cannot be reached does not
// hold up subscribing (the worker polls meanwhile), and the warning names
// the URL without its password.
func TestListenURLUnreachable(t *testing.T) {
	db := pgtest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &logbuf.Buffer{}
	const password = "s3cret-listen-pw"
	listenURL := "postgres://app:" + password + "@127.0.0.1:1/app"
	c := pgqueue.New(db.Pool, pgqueue.Config{ListenURL: listenURL, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	at := time.Now()
	wake, err := c.Wake(ctx, "q")
	if err != nil || wake == nil {
		t.Fatalf("Wake = %v, %v; want a channel (that fires once LISTEN works) and no error", wake, err)
	}
	if _, err := c.Cancelled(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(at); took > 2*time.Second {
		t.Fatalf("subscribing took %s with the LISTEN connection refused, want at once", took)
	}
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), "cannot open a LISTEN connection"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no warning about the LISTEN connection:\n%s", logs.String())
		}
	}
	line, _, _ := strings.Cut(logs.String(), "\n")
	t.Logf("a user sees: %s", line)
	if !strings.Contains(line, pgqueue.RedactConnString(listenURL)) || strings.Contains(logs.String(), password) {
		t.Fatalf("the warning must name %s and never the password:\n%s", pgqueue.RedactConnString(listenURL), logs.String())
	}
}
