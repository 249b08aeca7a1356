package scheduler_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/logbuf"
	"github.com/jobfence/jobfence/internal/netfault"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/scheduler"
)

const (
	msgEnqueueFailed = "scheduler: enqueue failed; retrying"
	msgStartRetry    = "scheduler: start: database unreachable; retrying"
)

// stopWithin stops s when the test ends, giving up on a fire's transaction
// after a bound, so that a test of a hang fails instead of hanging.
func stopWithin(t *testing.T, s *scheduler.Scheduler) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	})
}

// TestStalledEnqueueIsBounded: the scheduler's network goes silent (a
// black-holed route: nothing answers, nothing is closed) while it enqueues
// a per-second schedule. The fire's transaction must fail within
// EnqueueTimeout and the loop go on, so fires are enqueued again once the
// network is back. Before the fix, the transaction waited until TCP gave
// up (many minutes), and no schedule of the instance fired meanwhile.
func TestStalledEnqueueIsBounded(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	proxy := netfault.New(t, netfault.TargetOf(t, db.URL), netfault.Forward)
	const timeout = time.Second
	var logs logbuf.Buffer
	rec := newRecorder()
	s := scheduler.New(pgqueue.New(db.NewPoolVia(t, proxy.Addr(), 4), pgqueue.Config{Logger: quiet}), scheduler.Config{
		EnqueueTimeout: timeout, Logger: slog.New(slog.NewTextHandler(&logs, nil)), OnFire: rec.onFire(0),
	})
	if err := s.Add("tick", "* * * * * *", "tick", nil, scheduler.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopWithin(t, s)
	started := time.Now()
	testwatch.WaitFor(t, time.Minute, "a fire before the stall", func() bool { return rec.insertedAfter(0, started) > 0 })

	proxy.SetMode(netfault.Stall)
	stalled := time.Now()
	// The next fire comes within a second; its transaction must end within
	// the timeout after that.
	testwatch.WaitFor(t, timeout+time.Second+3*time.Second, "the stalled fire's transaction to fail", func() bool {
		return strings.Contains(logs.String(), msgEnqueueFailed)
	})
	t.Logf("the stalled fire failed %v after the stall", time.Since(stalled))

	proxy.SetMode(netfault.Forward)
	resumed := time.Now()
	testwatch.WaitFor(t, 30*time.Second, "a fire after the network came back", func() bool {
		return rec.insertedAfter(0, resumed) > 0
	})
}

// TestStartWaitsForDatabase: Start against a database that cannot be
// reached for a while (its host refusing connections, as while it starts
// up, or silent, as behind a partition) retries, logging each retry, and
// succeeds once it is reachable. Before the fix, Start failed at once, or
// hung on the silent network.
func TestStartWaitsForDatabase(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name string
		mode netfault.Mode
	}{{"refused", netfault.Refuse}, {"silent", netfault.Stall}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			proxy := netfault.New(t, netfault.TargetOf(t, db.URL), mode.mode)
			var logs logbuf.Buffer
			s := scheduler.New(pgqueue.New(db.NewPoolVia(t, proxy.Addr(), 4), pgqueue.Config{Logger: quiet}), scheduler.Config{
				EnqueueTimeout: 500 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			})
			if err := s.Add("hourly", "@hourly", "report", nil, scheduler.Options{}); err != nil {
				t.Fatal(err)
			}
			const down = 1500 * time.Millisecond
			up := time.AfterFunc(down, func() { proxy.SetMode(netfault.Forward) })
			defer up.Stop()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			begun := time.Now()
			if err := s.Start(ctx); err != nil {
				t.Fatalf("Start: %v (logs: %s)", err, logs.String())
			}
			stopWithin(t, s)
			if took := time.Since(begun); took < down {
				t.Fatalf("Start returned after %v, before the database was reachable (%v)", took, down)
			}
			if n := strings.Count(logs.String(), msgStartRetry); n == 0 {
				t.Fatalf("no retry logged: %s", logs.String())
			}
			infos, err := scheduler.List(ctx, db.Pool)
			if err != nil || len(infos) != 1 || infos[0].Name != "hourly" {
				t.Fatalf("schedules %+v, %v; want hourly registered", infos, err)
			}
		})
	}
}

// TestStartGivesUpWithCtx: Start keeps retrying an unreachable database
// only until its ctx ends, and says so.
func TestStartGivesUpWithCtx(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	proxy := netfault.New(t, netfault.TargetOf(t, db.URL), netfault.Refuse)
	s := scheduler.New(pgqueue.New(db.NewPoolVia(t, proxy.Addr(), 4), pgqueue.Config{Logger: quiet}), scheduler.Config{Logger: quiet})
	if err := s.Add("hourly", "@hourly", "report", nil, scheduler.Options{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	begun := time.Now()
	err := s.Start(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start: %v, want context.DeadlineExceeded", err)
	}
	if took := time.Since(begun); took > 4*time.Second {
		t.Fatalf("Start returned %v after its 1s ctx", took)
	}
	if err := s.Stop(context.Background()); !errors.Is(err, scheduler.ErrNotStarted) {
		t.Fatalf("Stop after a failed Start: %v, want ErrNotStarted", err)
	}
}
