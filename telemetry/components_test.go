package telemetry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jobfence/jobfence/idempotency"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/scheduler"
	"github.com/jobfence/jobfence/telemetry"
)

// TestScheduler: fires, duplicates and missed fires are counted by
// schedule, and the user's hooks still run.
func TestScheduler(t *testing.T) {
	in := newInstruments(t)
	userFires := 0
	cfg := scheduler.Config{OnFire: func(scheduler.Fire) { userFires++ }}
	if err := telemetry.Scheduler(&cfg, in.opts); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	cfg.OnFire(scheduler.Fire{Schedule: "report", At: now, Inserted: true})
	cfg.OnFire(scheduler.Fire{Schedule: "report", At: now})
	cfg.OnFire(scheduler.Fire{Schedule: "report", At: now})
	cfg.OnMissed(scheduler.Missed{Schedule: "report", Fires: 4, First: now, Last: now})
	rm := in.collect(t)
	for name, want := range map[string]int64{"jobfence.scheduler.fires": 1, "jobfence.scheduler.duplicates": 2, "jobfence.scheduler.missed": 4} {
		if got := sumBy(t, rm, name, "schedule", "report"); got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
	if userFires != 3 {
		t.Errorf("the user's OnFire ran %d times, want 3", userFires)
	}
}

// TestIdempotency counts a real store's runs, replays and key reuses.
func TestIdempotency(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	in := newInstruments(t)
	o := idempotency.Options{Scope: "charge"}
	if err := telemetry.Idempotency(&o, in.opts); err != nil {
		t.Fatal(err)
	}
	s := idempotency.New(db.Pool, o)
	ok := func(context.Context) ([]byte, error) { return []byte("ok"), nil }
	for range 3 {
		if _, err := s.Do(ctx, "k1", "fp", ok); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Do(ctx, "k1", "another request", ok); !errors.Is(err, idempotency.ErrKeyReused) {
		t.Fatalf("reuse: %v", err)
	}
	if _, err := s.Do(ctx, "k2", "fp", ok); err != nil {
		t.Fatal(err)
	}
	rm := in.collect(t)
	for name, want := range map[string]int64{"jobfence.idempotency.runs": 2, "jobfence.idempotency.replays": 2, "jobfence.idempotency.key_reuses": 1} {
		if got := sumBy(t, rm, name, "scope", "charge"); got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
}
