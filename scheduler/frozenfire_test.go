package scheduler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/sqlfreeze"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/internal/txbound"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/scheduler"
)

// TestFrozenFireHoldsUpOthersBriefly: instance A freezes (its client
// stops, as a paused VM's does) in a fire's transaction, right after it
// recorded the fire on the schedule's row, before its commit. The row,
// and the fire's unique key, stay locked until the server ends A's idle
// transaction: instance B, whose every fire of the schedule records
// itself on that row, must fire again within txbound.Idle and a margin,
// although A stays frozen. Before the fix
// the bound was EnqueueTimeout (30s by default): B fired nothing for as
// long.
func TestFrozenFireHoldsUpOthersBriefly(t *testing.T) {
	db := pgtest.New(t)
	rec := newRecorder()
	fz := sqlfreeze.New(t, db.URL, 4)
	a := scheduler.New(pgqueue.New(fz.Pool, pgqueue.Config{Logger: quiet}), scheduler.Config{Logger: quiet, OnFire: rec.onFire(0)})
	b := scheduler.New(pgqueue.New(db.Pool, pgqueue.Config{Logger: quiet}), scheduler.Config{Logger: quiet, OnFire: rec.onFire(1)})
	for _, s := range []*scheduler.Scheduler{a, b} {
		if err := s.Add("tick", "* * * * * *", "tick", nil, scheduler.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	fz.Arm(sqlfreeze.Point{Match: func(sql string) bool { return strings.Contains(sql, "SET last_fire = $2") }})
	start(t, a)
	t.Cleanup(fz.Thaw) // before A's Stop, which waits for its fire
	fz.Frozen(t, 30*time.Second)
	frozen := time.Now()

	// B starts now: its registration waits for the schedule's row too.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	started := make(chan error, 1)
	go func() { started <- b.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-started; err == nil {
			stop(t, b)
		}
	})
	testwatch.WaitFor(t, txbound.Idle+5*time.Second, "a fire of the other instance while the first is frozen", func() bool {
		return rec.insertedAfter(1, frozen) > 0
	})
	t.Logf("the other instance fired %v after the first froze", time.Since(frozen))
}
