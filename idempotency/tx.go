package idempotency

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/internal/txbound"
)

// claimKeyTxSQL and extendLeaseTxSQL take a key, and extend its lease, in
// the caller's transaction, and bound the transaction by the lease in the
// same statement: a caller frozen right after taking the key is bounded
// too, at no extra round trip.
//
// claimKeyTxSQL bounds the transaction whether or not it took the key, and
// so returns one row either way (taken says which): an upsert that finds
// the key held still locks its row, until the transaction (or DoTx's
// savepoint) ends, and a caller frozen before that would otherwise hold
// the key's row, and keep its holder from completing it, for as long as it
// stayed frozen. Without a row of its own the bound is the lease ($4).
const (
	claimKeyTxSQL = `
WITH c AS (` + claimKeySQL + `, k.lease_expires_at
)
SELECT coalesce(fence, 0), coalesce(took_over, false), coalesce(short_lease, false), taken,` + txbound.Set + `
FROM (
    SELECT c.fence, c.took_over, c.short_lease, c.fence IS NOT NULL AS taken,
           coalesce(c.lease_expires_at, clock_timestamp() + $4::bigint * interval '1 microsecond') AS lease_expires_at
    FROM (VALUES (1)) AS one LEFT JOIN c ON true
) b`
	extendLeaseTxSQL = extendLeaseSQL + `
RETURNING` + txbound.Set
)

// completeKeyTxSQL stores the response, as completeKeySQL does, and bounds
// the rest of the transaction by the lease the key had left: the main
// query reads the row as it was before the update (a data-modifying WITH
// is not visible to its main query), and returns a row only if the update
// did, that is if the fence still held the key.
const completeKeyTxSQL = `
WITH done AS (` + completeKeySQL + `
    RETURNING 1)
SELECT` + txbound.Set + `
FROM jobfence_idempotency_keys, done
WHERE scope = $1 AND key = $2`

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
// response.
//
// The lease bounds tx. DoTx does not extend it: the row lock holds the key
// until tx ends. So that a frozen caller (a stopped process, a paused VM)
// cannot hold the lock, and the key, for as long as it stays frozen, DoTx
// sets idle_in_transaction_session_timeout and lock_timeout for the rest
// of tx (SET LOCAL): to the lease when it takes the key, and to what is
// left of the lease, but at least a second, when it stores the response; a
// lower bound that tx already had is kept. If tx then sits idle longer than
// that, PostgreSQL ends its session: tx rolls back, key and writes
// included, and the next caller takes the key over. So commit tx soon after
// DoTx returns, and keep fn, and each of its lock waits, within the lease.
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
		err := sp.QueryRow(ctx, completeKeyTxSQL, s.opts.Scope, key, c.fence, c.response, s.opts.Retention.Microseconds()).Scan(nil, nil)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, &StaleFenceError{Scope: s.opts.Scope, Key: key, Fence: c.fence}
		}
		if err != nil {
			return nil, fmt.Errorf("idempotency: complete key %q: %w", key, err)
		}
		if s.afterComplete != nil {
			s.afterComplete()
		}
	}
	if err := sp.Commit(ctx); err != nil {
		return nil, fmt.Errorf("idempotency: release savepoint: %w", err)
	}
	released = true
	return c.response, nil
}
