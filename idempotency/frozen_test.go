package idempotency_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/idempotency"
	"github.com/jobfence/jobfence/internal/freeze"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/sqlfreeze"
	"github.com/jobfence/jobfence/internal/testchild"
)

// settingMs reads a timeout setting of tx's session in milliseconds.
func settingMs(t *testing.T, ctx context.Context, tx pgx.Tx, name string) float64 {
	t.Helper()
	var ms float64
	if err := tx.QueryRow(ctx, "SELECT extract(epoch FROM current_setting($1)::interval) * 1000", name).Scan(&ms); err != nil {
		t.Fatal(err)
	}
	return ms
}

// TestDoTxBoundsCallerTransaction: taking a key bounds the caller's idle
// time and lock waits by the lease, completing it by the lease left; a
// lower bound the caller had set stays; a replay, which holds no key,
// changes neither.
func TestDoTxBoundsCallerTransaction(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.New(t)
	if _, err := db.Pool.Exec(ctx, chargesSQL); err != nil {
		t.Fatal(err)
	}
	const lease = 20 * time.Second
	s := idempotency.New(db.Pool, idempotency.Options{Scope: "bound", Lease: lease})
	err := inTx(t, ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '1500ms'"); err != nil {
			return err
		}
		_, err := s.DoTx(ctx, tx, "k", "fp", func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			if idle := settingMs(t, ctx, tx, "idle_in_transaction_session_timeout"); idle < 15000 || idle > 20000 {
				t.Errorf("idle bound in fn %vms, want the lease (20s)", idle)
			}
			// fn outlives part of the lease: the bound at completion is what is left.
			time.Sleep(2 * time.Second)
			return charge("k", "ok")(ctx, tx)
		})
		if err != nil {
			return err
		}
		if idle := settingMs(t, ctx, tx, "idle_in_transaction_session_timeout"); idle < 12000 || idle > 18000 {
			t.Errorf("idle bound after DoTx %vms, want the lease left (about 18s)", idle)
		}
		if lock := settingMs(t, ctx, tx, "lock_timeout"); lock != 1500 {
			t.Errorf("lock_timeout after DoTx %vms, want the caller's 1500ms", lock)
		}
		return nil
	}, true)
	if err != nil {
		t.Fatal(err)
	}
	err = inTx(t, ctx, db.Pool, func(tx pgx.Tx) error {
		got, err := s.DoTx(ctx, tx, "k", "fp", charge("k", "again"))
		if err != nil || string(got) != "ok" {
			t.Fatalf("replay: %q, %v", got, err)
		}
		for _, name := range []string{"idle_in_transaction_session_timeout", "lock_timeout"} {
			if ms := settingMs(t, ctx, tx, name); ms != 0 {
				t.Errorf("%s after a replay %vms, want unset", name, ms)
			}
		}
		return nil
	}, true)
	if err != nil {
		t.Fatal(err)
	}
}

const frozenTxHolderEnv = "JOBFENCE_IDEMPOTENCY_FROZEN_TX_HOLDER"

// frozenTxLease is the lease of the child of TestDoTxFrozenHolderReleasesKey.
const frozenTxLease = 2 * time.Second

// frozenTxHolderMain is the child process of
// TestDoTxFrozenHolderReleasesKey. In a transaction it runs DoTx on key
// "charge-1" (Lease frozenTxLease), whose fn inserts a charge; right after
// the key's completion, before its commit, it prints "completed" and stops
// itself with SIGSTOP. Once continued it commits, prints "commit: ok" or
// "commit: failed: <error>", and exits 0 if the commit failed, 1 if not.
func frozenTxHolderMain() int {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println("error:", err)
		return 2
	}
	defer pool.Close()
	s := idempotency.WithAfterComplete(
		idempotency.New(pool, idempotency.Options{Scope: "frozen", Lease: frozenTxLease}),
		func() {
			fmt.Println("completed")
			freeze.Self()
		})
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := s.DoTx(ctx, tx, "charge-1", "fp", charge("charge-1", "child"))
		return err
	})
	if err == nil {
		fmt.Println("commit: ok")
		return 1
	}
	fmt.Println("commit: failed:", err)
	return 0
}

// TestDoTxFrozenHolderReleasesKey: a child process completes a key in
// DoTx and freezes (SIGSTOP) before it commits, holding the key's row
// lock. Another caller must get the key once the child's lease has run
// out, not when the child wakes: PostgreSQL ends the frozen transaction.
// Before the fix it waited for as long as the child stayed frozen. Woken,
// the child's commit fails, and the charge was made once, by the taker.
func TestDoTxFrozenHolderReleasesKey(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.New(t)
	if _, err := db.Pool.Exec(ctx, chargesSQL); err != nil {
		t.Fatal(err)
	}
	c := testchild.Start(t, frozenTxHolderEnv, "DATABASE_URL="+db.URL)
	if l := c.Next(t); l != "completed" {
		t.Fatalf("child said %q (stderr %s)", l, c.Stderr())
	}
	frozen := time.Now()

	s := idempotency.New(db.Pool, idempotency.Options{Scope: "frozen"})
	bound, cancel := context.WithTimeout(ctx, frozenTxLease+3*time.Second)
	defer cancel()
	var got []byte
	err := inTx(t, bound, db.Pool, func(tx pgx.Tx) error {
		var err error
		got, err = s.DoTx(bound, tx, "charge-1", "fp", charge("charge-1", "parent"))
		return err
	}, true)
	if err != nil || string(got) != "parent" {
		t.Fatalf("the next caller, %v after the holder froze with a %v lease: %q, %v", time.Since(frozen), frozenTxLease, got, err)
	}

	c.Signal(t, syscall.SIGCONT)
	l := c.Next(t)
	if waitErr := c.Wait(); !strings.HasPrefix(l, "commit: failed") || waitErr != nil {
		t.Fatalf("woken child said %q and exited with %v, want a failed commit (stderr %s)", l, waitErr, c.Stderr())
	}
	r, err := s.Lookup(ctx, "charge-1")
	if err != nil || string(r.Response) != "parent" {
		t.Fatalf("key %+v, %v", r, err)
	}
	var n int
	var fence int64
	if err := db.Pool.QueryRow(ctx, "SELECT count(*), coalesce(max(fence), 0) FROM charges").Scan(&n, &fence); err != nil || n != 1 || fence != r.Fence {
		t.Fatalf("%d charges, the last under fence %d (%v); want 1, under the taker's fence %d", n, fence, err, r.Fence)
	}
}

// TestDoTxFrozenAfterLosingTheRaceFreesKey: caller B finds a key free (its
// holder's lease ran out) and, in its transaction, tries to take it; C
// takes it over first. B's claim then finds the key held and takes
// nothing, but its upsert locked the key's row, and B freezes right there
// (its client stops, as a paused VM's does). C's completion of the key
// waits for that lock: it must go through once B's lease has run out,
// although B stays frozen, because the claim bounded B's transaction by
// the lease whether or not it took the key. Before the fix only a claim
// that took the key bounded it, and C waited for as long as B stayed
// frozen.
func TestDoTxFrozenAfterLosingTheRaceFreesKey(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.New(t)
	if _, err := db.Pool.Exec(ctx, chargesSQL); err != nil {
		t.Fatal(err)
	}
	// A key in progress whose holder's lease ran out: its holder died.
	if _, err := db.Pool.Exec(ctx, `
INSERT INTO jobfence_idempotency_keys (scope, key, fingerprint, state, fence, lease_expires_at, expires_at)
VALUES ('race', 'k', 'fp', 'in_progress', nextval('jobfence_fence_seq'), now() - interval '1 second', now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	const lease = 2 * time.Second
	fz := sqlfreeze.New(t, db.URL, 2)
	b := idempotency.New(fz.Pool, idempotency.Options{Scope: "race", Lease: lease})
	c := idempotency.New(db.Pool, idempotency.Options{Scope: "race", Lease: time.Minute})

	cHolds, cGo, cDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	fz.Arm(sqlfreeze.Point{
		Match: func(sql string) bool { return strings.Contains(sql, "INSERT INTO jobfence_idempotency_keys") },
		// B has read the key and found it free: C takes it over now.
		Before: func() {
			go func() {
				_, err := c.Do(ctx, "k", "fp", func(context.Context) ([]byte, error) {
					close(cHolds)
					<-cGo
					return []byte("c"), nil
				})
				cDone <- err
			}()
			<-cHolds
		},
	})
	bDone := make(chan error, 1)
	go func() {
		bDone <- pgx.BeginFunc(ctx, fz.Pool, func(tx pgx.Tx) error {
			_, err := b.DoTx(ctx, tx, "k", "fp", charge("k", "b"))
			return err
		})
	}()
	fz.Frozen(t, 30*time.Second)
	frozen := time.Now()
	close(cGo)
	select {
	case err := <-cDone:
		if err != nil {
			t.Fatalf("C: %v", err)
		}
		t.Logf("C completed the key %v after B froze holding its row", time.Since(frozen))
	case <-time.After(lease + 5*time.Second):
		t.Fatalf("C could not complete the key within %v of B's freeze (B's lease %v)", time.Since(frozen), lease)
	}
	fz.Thaw()
	<-bDone // B's transaction was ended, or B found C's response: either way B charged nothing
	r, err := c.Lookup(ctx, "k")
	if err != nil || r.State != idempotency.StateCompleted || string(r.Response) != "c" {
		t.Fatalf("key %+v, %v; want completed by C", r, err)
	}
	if n := countRows(t, ctx, db.Pool, "charges"); n != 0 {
		t.Fatalf("%d charges, want none (C's fn charges nothing, B's must not run)", n)
	}
}
