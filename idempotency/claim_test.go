package idempotency_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/idempotency"
	"github.com/jobfence/jobfence/internal/pgtest"
)

// TestClaimAfterLockWaitHasFullLease: B's claim waits behind a transaction
// that holds the same new key for longer than the lease, then rolls back.
// B must start with a full lease, so C cannot take the key over while B's fn
// runs (which would run fn twice: a double charge).
func TestClaimAfterLockWaitHasFullLease(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.New(t)
	s := idempotency.New(db.Pool, idempotency.Options{Scope: "lease", Lease: time.Second})
	var running, maxRunning atomic.Int64
	fn := func(ctx context.Context) ([]byte, error) {
		n := running.Add(1)
		for m := maxRunning.Load(); n > m && !maxRunning.CompareAndSwap(m, n); m = maxRunning.Load() {
		}
		time.Sleep(1500 * time.Millisecond)
		running.Add(-1)
		return []byte("ok"), nil
	}
	t1done := make(chan struct{})
	go func() {
		defer close(t1done)
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		defer tx.Rollback(ctx)
		s.DoTx(ctx, tx, "k", "fp", func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			// Busy longer than the lease, then roll back. (A transaction
			// idle that long would be ended by PostgreSQL at the lease.)
			_, err := tx.Exec(ctx, "SELECT pg_sleep(3)")
			return []byte("tx"), err
		})
	}()
	time.Sleep(200 * time.Millisecond)
	bStarted := make(chan struct{})
	bres := make(chan error, 1)
	go func() {
		_, err := s.Do(ctx, "k", "fp", func(ctx context.Context) ([]byte, error) {
			close(bStarted)
			return fn(ctx)
		})
		bres <- err
	}()
	<-t1done
	<-bStarted
	_, errC := s.Do(ctx, "k", "fp", fn)
	if !errors.Is(errC, idempotency.ErrInProgress) {
		t.Errorf("C's Do while B runs = %v, want ErrInProgress", errC)
	}
	if err := <-bres; err != nil {
		t.Errorf("B's Do = %v", err)
	}
	if n := maxRunning.Load(); n != 1 {
		t.Fatalf("fn ran %d times at once, want 1", n)
	}
}

// TestReplayInTxDoesNotBlockOthers: replaying a completed key inside a
// caller's open transaction must not lock the key for other callers.
func TestReplayInTxDoesNotBlockOthers(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.New(t)
	s := idempotency.New(db.Pool, idempotency.Options{Scope: "replay"})
	ok := func(ctx context.Context) ([]byte, error) { return []byte("ok"), nil }
	if _, err := s.Do(ctx, "k", "fp", ok); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	r, err := s.DoTx(ctx, tx, "k", "fp", func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		return nil, errors.New("fn ran for a completed key")
	})
	if err != nil || string(r) != "ok" {
		t.Fatalf("replay in tx = %q, %v", r, err)
	}
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	r, err = s.Do(short, "k", "fp", ok)
	if err != nil || string(r) != "ok" {
		t.Fatalf("Do while another transaction replays the key = %q, %v; want the stored response at once", r, err)
	}
}
