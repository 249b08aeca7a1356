package idempotency_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/idempotency"
	"github.com/jobfence/jobfence/internal/pgtest"
)

func TestResultStorePutIsFenced(t *testing.T) {
	type put struct {
		fence     int64
		value     string
		wantStale bool
	}
	tests := []struct {
		name      string
		puts      []put
		wantValue string
		wantFence int64
	}{
		{"newer owner after older", []put{{33, "A", false}, {34, "B", false}}, "B", 34},
		{"older owner after newer", []put{{34, "B", false}, {33, "A", true}}, "B", 34},
		{"same owner writes again", []put{{34, "B", false}, {34, "B2", false}}, "B2", 34},
		{"stale among many", []put{{10, "x", false}, {50, "y", false}, {49, "z", true}, {51, "w", false}}, "w", 51},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			db := pgtest.New(t)
			rs := idempotency.NewResultStore(db.Pool, "results")
			for _, p := range tt.puts {
				err := rs.Put(ctx, "job-1", p.fence, []byte(p.value))
				if p.wantStale {
					var sf *idempotency.StaleFenceError
					if !errors.Is(err, idempotency.ErrStaleFence) || !errors.As(err, &sf) || sf.Fence != p.fence {
						t.Fatalf("put %d: %v, want a *StaleFenceError", p.fence, err)
					}
				} else if err != nil {
					t.Fatalf("put %d: %v", p.fence, err)
				}
			}
			res, err := rs.Get(ctx, "job-1")
			if err != nil || string(res.Value) != tt.wantValue || res.Fence != tt.wantFence || res.UpdatedAt.IsZero() {
				t.Fatalf("result %+v, %v; want %q under %d", res, err, tt.wantValue, tt.wantFence)
			}
		})
	}
}

func TestResultStoreGetAndErrors(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.New(t)
	rs := idempotency.NewResultStore(db.Pool, "")
	_, err := rs.Get(ctx, "missing")
	want := `idempotency: result "missing" (scope "default"): jobfence: result not found`
	if !errors.Is(err, idempotency.ErrResultNotFound) || err.Error() != want {
		t.Fatalf("Get of a missing key: %v, want %q", err, want)
	}
	if err := rs.Put(ctx, "", 1, nil); err == nil || err.Error() != "jobfence: invalid key: key is empty" {
		t.Fatalf("Put with an empty key: %v", err)
	}
	if err := rs.PutTx(ctx, nil, "k", 1, nil); err == nil || err.Error() != "jobfence: idempotency: PutTx: tx is nil" {
		t.Fatalf("PutTx with a nil tx: %v", err)
	}
	if _, err := rs.Prune(ctx, -1, 0); err == nil || err.Error() != "jobfence: idempotency: Prune: negative retention -1ns" {
		t.Fatalf("Prune with a negative retention: %v", err)
	}
	// Scopes are independent.
	other := idempotency.NewResultStore(db.Pool, "other")
	if err := rs.Put(ctx, "k", 5, []byte("default")); err != nil {
		t.Fatal(err)
	}
	if err := other.Put(ctx, "k", 1, []byte("other")); err != nil {
		t.Fatalf("a smaller fence in another scope: %v", err)
	}
}

// TestResultStorePutTx: a result written in a transaction commits or rolls
// back with it, and a stale write leaves the transaction usable.
func TestResultStorePutTx(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.New(t)
	rs := idempotency.NewResultStore(db.Pool, "tx")
	if err := inTx(t, ctx, db.Pool, func(tx pgx.Tx) error { return rs.PutTx(ctx, tx, "k", 7, []byte("rolled back")) }, false); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Get(ctx, "k"); !errors.Is(err, idempotency.ErrResultNotFound) {
		t.Fatalf("after rollback: %v", err)
	}
	err := inTx(t, ctx, db.Pool, func(tx pgx.Tx) error {
		if err := rs.PutTx(ctx, tx, "k", 7, []byte("seven")); err != nil {
			return err
		}
		if err := rs.PutTx(ctx, tx, "k", 6, []byte("six")); !errors.Is(err, idempotency.ErrStaleFence) {
			t.Fatalf("stale PutTx: %v", err)
		}
		return rs.PutTx(ctx, tx, "other", 1, []byte("one"))
	}, true)
	if err != nil {
		t.Fatalf("transaction after a stale write: %v", err)
	}
	for key, want := range map[string]string{"k": "seven", "other": "one"} {
		if res, err := rs.Get(ctx, key); err != nil || string(res.Value) != want {
			t.Fatalf("%s: %+v, %v", key, res, err)
		}
	}
	n, err := rs.Prune(ctx, 0, 1)
	if err != nil || n != 1 {
		t.Fatalf("Prune(0, 1) = %d, %v; want 1", n, err)
	}
	n, err = rs.Prune(ctx, 0, 0)
	if err != nil || n != 1 {
		t.Fatalf("Prune(0, 0) = %d, %v; want 1", n, err)
	}
}

func TestFenced(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.New(t)
	if _, err := db.Pool.Exec(ctx, ledgerSQL); err != nil {
		t.Fatal(err)
	}
	if err := idempotency.Fenced(db.Pool.Exec(ctx, writeLedgerSQL, "B", 34)); err != nil {
		t.Fatalf("current fence: %v", err)
	}
	if err := idempotency.Fenced(db.Pool.Exec(ctx, writeLedgerSQL, "A", 33)); err != idempotency.ErrStaleFence {
		t.Fatalf("stale fence: %v, want ErrStaleFence", err)
	}
	if err := idempotency.Fenced(db.Pool.Exec(ctx, "UPDATE no_such_table SET x = 1")); err == nil || errors.Is(err, idempotency.ErrStaleFence) {
		t.Fatalf("failed statement: %v, want its own error", err)
	}
	if owner, fence := readLedger(t, ctx, db.Pool); owner != "B" || fence != 34 {
		t.Fatalf("ledger %s/%d", owner, fence)
	}
}
