package scheduler_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/internal/logbuf"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/scheduler"
)

// TestSlowScheduleDelaysNoOther holds a lock that one schedule's enqueue
// needs for several grace periods: the other schedule's fires that came due
// meanwhile are late but were never missed, so every one is enqueued, and
// so are the slow schedule's own.
func TestSlowScheduleDelaysNoOther(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	const grace = 2 * time.Second
	var logs logbuf.Buffer
	rec := newRecorder()
	s := scheduler.New(pgqueue.New(db.NewPool(t, 4), pgqueue.Config{Logger: quiet}), scheduler.Config{
		Grace: grace, Logger: slog.New(slog.NewTextHandler(&logs, nil)), OnFire: rec.onFire(0),
	})
	tx := startSlowAndOther(t, db, s)
	ctx := context.Background()
	blocked := time.Now()
	// Several fires of "other" come due and pass their grace.
	time.Sleep(3 * grace)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	testwatch.WaitFor(t, time.Minute, "both schedules to insert two fires after the lock was released", func() bool {
		r := rec.inserted(0)
		return slices.ContainsFunc(r, func(f scheduler.Fire) bool { return f.Schedule == "slow" && f.At.After(released.Add(time.Second)) }) &&
			slices.ContainsFunc(r, func(f scheduler.Fire) bool { return f.Schedule == "other" && f.At.After(released.Add(time.Second)) })
	})
	stop(t, s)

	all := jobs(t, db.Pool)
	for _, name := range []string{"slow", "other"} {
		mine := slices.DeleteFunc(slices.Clone(all), func(j storedJob) bool { return !strings.HasPrefix(j.Key, "cron:"+name+":") })
		checkOnePerFire(t, name, mine)
		if !mine[0].At.Before(blocked) || !mine[len(mine)-1].At.After(released) {
			t.Fatalf("%s's jobs run from %v to %v, not across the lock held from %v to %v", name, mine[0].At, mine[len(mine)-1].At, blocked, released)
		}
	}
	if out := logs.String(); strings.Contains(out, "missed") {
		t.Fatalf("fires were reported missed:\n%s", out)
	}
}

// TestStopDuringSlowEnqueue calls Stop while one schedule's enqueue waits for
// a lock, and Add and Start concurrently: Stop lets that fire commit but
// enqueues no other schedule's, Add and Start say the Scheduler is stopping
// until Stop returns, and then it starts again. Run with -race, it also
// shows that the restarted loop shares no state with the old one.
func TestStopDuringSlowEnqueue(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	rec := newRecorder()
	s := scheduler.New(pgqueue.New(db.NewPool(t, 4), pgqueue.Config{Logger: quiet}), scheduler.Config{
		Logger: quiet, OnFire: rec.onFire(0),
	})
	tx := startSlowAndOther(t, db, s)
	ctx := context.Background()

	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop(ctx) }()
	testwatch.WaitFor(t, time.Minute, "Stop to begin", func() bool {
		return errors.Is(s.Add("late", "@hourly", "late", nil, scheduler.Options{}), scheduler.ErrStopping)
	})
	wantAdd := `scheduler: schedule "late" spec "@hourly": scheduler: stopping`
	if err := s.Add("late", "@hourly", "late", nil, scheduler.Options{}); err == nil || err.Error() != wantAdd {
		t.Fatalf("Add while stopping: %v, want %s", err, wantAdd)
	}
	if err := s.Start(ctx); !errors.Is(err, scheduler.ErrStopping) || err.Error() != "scheduler: stopping" {
		t.Fatalf("Start while stopping: %v, want ErrStopping", err)
	}
	if err := s.Stop(ctx); !errors.Is(err, scheduler.ErrStopping) {
		t.Fatalf("second Stop while stopping: %v, want ErrStopping", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Stop: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Stop did not return in a minute after the lock was released")
	}

	all := jobs(t, db.Pool)
	var lastSlow, lastOther time.Time
	for _, j := range all {
		switch {
		case strings.HasPrefix(j.Key, "cron:slow:"):
			lastSlow = later(lastSlow, j.At)
		case strings.HasPrefix(j.Key, "cron:other:"):
			lastOther = later(lastOther, j.At)
		}
	}
	// The fire "slow" was enqueuing when Stop began committed; "other"'s
	// same fire was not enqueued.
	if lastSlow.IsZero() || !lastOther.Before(lastSlow) {
		t.Fatalf(`after Stop, the last fire of "slow" is %v and of "other" %v: want "other" to stop before "slow"'s last fire`, lastSlow, lastOther)
	}

	// Stopped, the Scheduler starts again and enqueues the next fires.
	restarted := time.Now()
	start(t, s)
	testwatch.WaitFor(t, time.Minute, "a fire after the restart", func() bool {
		return slices.ContainsFunc(rec.inserted(0), func(f scheduler.Fire) bool { return f.Schedule == "other" && f.At.After(restarted) })
	})
	stop(t, s)
}

// startSlowAndOther adds two per-second schedules to s, "slow" (which the
// loop handles first in each tick) and "other", starts s, and holds slow's
// row so that its enqueues wait until the returned transaction ends.
func startSlowAndOther(t *testing.T, db *pgtest.DB, s *scheduler.Scheduler) pgx.Tx {
	t.Helper()
	for _, name := range []string{"slow", "other"} {
		if err := s.Add(name, "* * * * * *", name, nil, scheduler.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	start(t, s)
	return holdScheduleRow(t, db, "slow")
}

// holdScheduleRow locks schedule name's row in a transaction of its own and
// returns once an enqueue of that schedule waits for it (recording a fire
// updates the row). The transaction is rolled back when the test ends, if
// the test has not done so.
func holdScheduleRow(t *testing.T, db *pgtest.DB, name string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx := pgtest.Begin(t, db.Pool)
	var holder int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid() FROM jobfence_schedules WHERE name = $1 FOR UPDATE`, name).Scan(&holder); err != nil {
		t.Fatal(err)
	}
	testwatch.WaitFor(t, time.Minute, "an enqueue of "+name+" to wait for the lock", func() bool {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, holder).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	return tx
}
