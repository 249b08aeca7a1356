package main

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
)

// TestSampleActivityCountsTurnWaits: a claim waiting for its turn (an
// advisory lock) is counted as such, not as an outcome waiting for a lock,
// which is what the fleet's report said of every turn's wait before.
func TestSampleActivityCountsTurnWaits(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	holder, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The holder's transaction ends at the test's end at the latest (the
	// deferred rollback), which ends the waiter's wait; the waiter's
	// session closes with the test too.
	defer holder.Rollback(ctx)
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_xact_lock(42)`); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "bench-turn-test"
	waiter, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := waiter.Exec(ctx, `SELECT pg_advisory_xact_lock(42)`)
		waited <- err
	}()
	testwatch.WaitFor(t, time.Minute, "the second session waiting for the lock", func() bool {
		var n int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'bench-turn-test' AND wait_event_type = 'Lock'`).Scan(&n)
		return err == nil && n == 1
	})
	// Sample until a sample is taken (its connection may be slow to come
	// on a loaded machine); the waiter waits throughout.
	var a activity
	for deadline := time.Now().Add(time.Minute); a.samples == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no sample taken in a minute")
		}
		stop := sampleActivity(ctx, db.URL, "bench-turn-test")
		time.Sleep(500 * time.Millisecond)
		a = stop()
	}
	if got := a.turnWaitMean(); got != 1 {
		t.Fatalf("turn waits per sample %v, want 1 (waits %v)", got, a.waits)
	}
	if got := a.waitMean("outcome/"); got != 0 {
		t.Fatalf("outcome waits per sample %v, want 0 (waits %v)", got, a.waits)
	}
	holder.Rollback(ctx)
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
}
