package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobfence/jobfence/idempotency"
	"github.com/jobfence/jobfence/internal/pgtest"
)

// TestExpiredKeyRunsAgain: once a key's retention has passed, it no longer
// protects retries, even before it is pruned.
func TestExpiredKeyRunsAgain(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.New(t)
	s := idempotency.New(db.Pool, idempotency.Options{Retention: time.Microsecond})
	var runs atomic.Int32
	for i := range 2 {
		fp := fmt.Sprintf("fp-%d", i) // after expiry a new fingerprint is no reuse
		if _, err := s.Do(ctx, "k", fp, func(context.Context) ([]byte, error) { runs.Add(1); return nil, nil }); err != nil {
			t.Fatal(err)
		}
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("fn ran %d times across an expiry, want 2", n)
	}
}

// TestPrune deletes expired keys of every scope in bounded batches, and
// keeps unexpired keys and keys whose holder is still running.
func TestPrune(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.New(t)
	short := idempotency.New(db.Pool, idempotency.Options{Scope: "short", Retention: time.Microsecond})
	long := idempotency.New(db.Pool, idempotency.Options{Scope: "long"})
	noop := func(context.Context) ([]byte, error) { return []byte("ok"), nil }
	for i := range 3 {
		for _, s := range []*idempotency.Store{short, short.WithScope("short-2")} {
			if _, err := s.Do(ctx, fmt.Sprintf("k%d", i), "fp", noop); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := long.Do(ctx, "k0", "fp", noop); err != nil {
		t.Fatal(err)
	}
	// A holder still running on an expired key keeps it.
	held, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := short.Do(ctx, "running", "fp", func(context.Context) ([]byte, error) {
			close(held)
			<-release
			return nil, nil
		})
		done <- err
	}()
	<-held

	var got []int
	for {
		n, err := short.Prune(ctx, 4)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, n)
		if n == 0 {
			break
		}
	}
	if fmt.Sprint(got) != "[4 2 0]" {
		t.Fatalf("batches %v, want [4 2 0]", got)
	}
	if _, err := long.Lookup(ctx, "k0"); err != nil {
		t.Fatalf("unexpired key: %v", err)
	}
	if r, err := short.Lookup(ctx, "running"); err != nil || r.State != idempotency.StateInProgress {
		t.Fatalf("running key: %+v, %v", r, err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestRunPruner(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.New(t)
	s := idempotency.New(db.Pool, idempotency.Options{Retention: time.Microsecond})
	for i := range 3 {
		if _, err := s.Do(ctx, fmt.Sprint(i), "fp", func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
			t.Fatal(err)
		}
	}
	pctx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- s.RunPruner(pctx, 10*time.Millisecond) }()
	for countRows(t, ctx, db.Pool, "jobfence_idempotency_keys") != 0 {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-stopped; !errors.Is(err, context.Canceled) {
		t.Fatalf("RunPruner returned %v, want context.Canceled", err)
	}
}
