package idempotency_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/idempotency"
	"github.com/jobfence/jobfence/internal/pgtest"
)

// TestPgBouncerOneKeyManyInstances: ten instances, each with a pool of its
// own through PgBouncer in transaction mode (pool size 4), call Do and
// DoTx with one key each at once. fn runs once per key, every caller gets
// its response, and DoTx's transaction-local bounds (set_config) work on
// pooled server connections.
func TestPgBouncerOneKeyManyInstances(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.NewBounced(t, pgtest.BouncedOptions{PoolSize: 4})
	const instances = 10
	var runs, runsTx atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 2*instances)
	for range instances {
		pool := db.BouncedPool(t, 3)
		s := idempotency.New(pool, idempotency.Options{Scope: "bounced", WaitForInProgress: true, PollInterval: 10 * time.Millisecond})
		wg.Go(func() {
			got, err := s.Do(ctx, "do-key", "fp", func(context.Context) ([]byte, error) {
				runs.Add(1)
				return []byte("done"), nil
			})
			if err == nil && string(got) != "done" {
				err = errors.New("Do's response: " + string(got))
			}
			errs <- err
		})
		wg.Go(func() {
			var got []byte
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				var err error
				got, err = s.DoTx(ctx, tx, "tx-key", "fp", func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
					runsTx.Add(1)
					return []byte("done in tx"), nil
				})
				return err
			})
			if err == nil && string(got) != "done in tx" {
				err = errors.New("DoTx's response: " + string(got))
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n, m := runs.Load(), runsTx.Load(); n != 1 || m != 1 {
		t.Fatalf("fn ran %d times under Do and %d under DoTx, want once each", n, m)
	}
}
