package scheduler_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/scheduler"
)

// TestPauseResumeDeleteBools proves what the doc comments say the bools
// of Pause, Resume and Delete mean: true when the call changed the
// schedule (exactly one of concurrent calls), false with a nil error when
// there was nothing to change (a second Pause keeps the first pauser on
// record), and, for a name with no schedule, ErrNotFound from Pause and
// Resume but false with a nil error from Delete.
func TestPauseResumeDeleteBools(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := scheduler.Put(ctx, db.Pool, "digest", "0 8 * * *", "digest", nil, scheduler.Options{}); err != nil {
		t.Fatal(err)
	}
	// all runs f 8 times at once and counts the calls that reported true.
	all := func(what string, f func() (bool, error)) int64 {
		t.Helper()
		var wg sync.WaitGroup
		var yes atomic.Int64
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, err := f()
				if err != nil {
					t.Errorf("%s: %v", what, err)
				}
				if ok {
					yes.Add(1)
				}
			}()
		}
		wg.Wait()
		return yes.Load()
	}
	if n := all("Pause", func() (bool, error) { return scheduler.Pause(ctx, db.Pool, "digest", "alice") }); n != 1 {
		t.Errorf("8 concurrent Pauses of a running schedule: %d reported true, want 1", n)
	}
	first, err := scheduler.Get(ctx, db.Pool, "digest")
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := scheduler.Pause(ctx, db.Pool, "digest", "bob"); err != nil || changed {
		t.Errorf("Pause of a paused schedule = %v, %v; want false, nil", changed, err)
	}
	if i, err := scheduler.Get(ctx, db.Pool, "digest"); err != nil || i.PausedBy != "alice" || !i.PausedAt.Equal(first.PausedAt) {
		t.Errorf("after a second Pause: paused by %q at %v, %v; want alice's pause, at %v", i.PausedBy, i.PausedAt, err, first.PausedAt)
	}

	if n := all("Resume", func() (bool, error) { return scheduler.Resume(ctx, db.Pool, "digest") }); n != 1 {
		t.Errorf("8 concurrent Resumes of a paused schedule: %d reported true, want 1", n)
	}
	resumed, err := scheduler.Get(ctx, db.Pool, "digest")
	if err != nil || resumed.Paused {
		t.Fatalf("after Resume: %+v, %v; want it running", resumed, err)
	}
	if changed, err := scheduler.Resume(ctx, db.Pool, "digest"); err != nil || changed {
		t.Errorf("Resume of a running schedule = %v, %v; want false, nil", changed, err)
	}
	if i, err := scheduler.Get(ctx, db.Pool, "digest"); err != nil || !i.UpdatedAt.Equal(resumed.UpdatedAt) {
		t.Errorf("a Resume of a running schedule changed it: updated at %v, was %v (%v)", i.UpdatedAt, resumed.UpdatedAt, err)
	}

	if n := all("Delete", func() (bool, error) { return scheduler.Delete(ctx, db.Pool, "digest") }); n != 1 {
		t.Errorf("8 concurrent Deletes: %d reported true, want 1", n)
	}
	if found, err := scheduler.Delete(ctx, db.Pool, "digest"); err != nil || found {
		t.Errorf("Delete of no schedule = %v, %v; want false, nil", found, err)
	}
	if changed, err := scheduler.Pause(ctx, db.Pool, "digest", "alice"); changed || !errors.Is(err, scheduler.ErrNotFound) {
		t.Errorf("Pause of no schedule = %v, %v; want false, ErrNotFound", changed, err)
	}
	if changed, err := scheduler.Resume(ctx, db.Pool, "digest"); changed || !errors.Is(err, scheduler.ErrNotFound) {
		t.Errorf("Resume of no schedule = %v, %v; want false, ErrNotFound", changed, err)
	}
}
