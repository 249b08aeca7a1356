package idempotency

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// DoTx is Do inside the caller's transaction: the key's row, fn's writes
// through tx and the stored response commit or roll back together, so the
// operation has taken effect exactly when its response is stored. fn must
// not commit or roll back tx.
//
// DoTx works in a savepoint of tx. When fn fails DoTx rolls the savepoint
// back (the key and fn's writes vanish; tx stays usable) and returns fn's
// error unchanged. A stored response, ErrKeyReused and ErrInProgress leave
// tx usable too.
//
// The key's row stays locked until tx ends, so a concurrent call with the
// same key (in or out of a transaction) waits in Postgres until tx commits,
// and then returns the stored response, or rolls back, and then runs fn
// itself. Keep such transactions short. DoTx assumes the READ COMMITTED
// isolation level (Postgres's default); under REPEATABLE READ or
// SERIALIZABLE a concurrent first use of a key fails with a serialization
// error (SQLSTATE 40001), and the retried transaction gets the stored
// response. DoTx does not extend the lease: the row lock holds the key until
// tx ends, and a dead caller's transaction is rolled back by Postgres.
func (s *Store) DoTx(ctx context.Context, tx pgx.Tx, key, fingerprint string, fn func(ctx context.Context, tx pgx.Tx) ([]byte, error)) (resp []byte, err error) {
	if err := s.validate(key, fingerprint); err != nil {
		return nil, err
	}
	if tx == nil {
		return nil, errors.New("jobfence: idempotency: DoTx: tx is nil")
	}
	if fn == nil {
		return nil, errors.New("jobfence: idempotency: DoTx: fn is nil")
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("idempotency: savepoint: %w", err)
	}
	released := false
	defer func() {
		if !released { // an error or a panic: undo the key and fn's writes
			_ = sp.Rollback(context.WithoutCancel(ctx))
		}
	}()
	c, err := s.claimKey(ctx, sp, key, fingerprint, true)
	if err != nil {
		return nil, err
	}
	if !c.replayed {
		c.response, err = fn(withFence(ctx, c.fence), sp)
		if err != nil {
			return nil, err
		}
		tag, err := sp.Exec(ctx, completeKeySQL, s.opts.Scope, key, c.fence, c.response, s.opts.Retention.Microseconds())
		if err != nil {
			return nil, fmt.Errorf("idempotency: complete key %q: %w", key, err)
		}
		if tag.RowsAffected() == 0 {
			return nil, &StaleFenceError{Scope: s.opts.Scope, Key: key, Fence: c.fence}
		}
	}
	if err := sp.Commit(ctx); err != nil {
		return nil, fmt.Errorf("idempotency: release savepoint: %w", err)
	}
	released = true
	return c.response, nil
}
