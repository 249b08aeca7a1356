package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ResultStore keeps one result per key, written under fences: a write
// applies only when no greater fence has written the key, so an owner that
// lost its claim cannot overwrite the work of the owner that replaced it. It
// is safe for concurrent use.
//
// Write a job's result under the job's claim: Put(ctx, key, job.Fence,
// value). The fence may come from any source that only grows per key: a
// queue claim, a Kafka group generation, or FenceFrom inside Do.
type ResultStore struct {
	pool  *pgxpool.Pool
	scope string
}

// NewResultStore returns a ResultStore on pool whose keys live in scope
// (empty means DefaultScope). It panics if pool is nil.
func NewResultStore(pool *pgxpool.Pool, scope string) *ResultStore {
	if pool == nil {
		panic("idempotency: NewResultStore: nil pool")
	}
	if scope == "" {
		scope = DefaultScope
	}
	return &ResultStore{pool: pool, scope: scope}
}

// Result is a stored result.
type Result struct {
	Key string
	// Fence is the fence of the write that stored Value.
	Fence     int64
	Value     []byte
	UpdatedAt time.Time
}

// putResultSQL is the fenced upsert. The same fence may write again (an
// owner repeating its own write after an ambiguous failure); only a smaller
// one is refused.
const putResultSQL = `
INSERT INTO jobfence_results AS stored (scope, key, fence, value, updated_at)
VALUES ($1, $2, $3, $4, clock_timestamp())
ON CONFLICT (scope, key) DO UPDATE
SET fence = EXCLUDED.fence, value = EXCLUDED.value, updated_at = EXCLUDED.updated_at
WHERE stored.fence <= EXCLUDED.fence`

const getResultSQL = `
SELECT fence, value, updated_at FROM jobfence_results WHERE scope = $1 AND key = $2`

// pruneResultsSQL deletes up to $3 results of scope $1 written more than $2
// microseconds ago.
const pruneResultsSQL = `
DELETE FROM jobfence_results r
USING (
    SELECT scope, key FROM jobfence_results
    WHERE scope = $1 AND updated_at < clock_timestamp() - $2::bigint * interval '1 microsecond'
    ORDER BY updated_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
) d
WHERE r.scope = d.scope AND r.key = d.key`

// Put stores value as key's result under fence. It returns a
// *StaleFenceError (ErrStaleFence) and changes nothing when a greater fence
// has already written key.
func (r *ResultStore) Put(ctx context.Context, key string, fence int64, value []byte) error {
	return r.put(ctx, r.pool, key, fence, value)
}

// PutTx is Put inside the caller's transaction, for example a transactional
// job handler's: the result commits together with the handler's other
// writes and the job's fenced completion. A stale fence leaves tx usable;
// the caller decides whether to roll back.
func (r *ResultStore) PutTx(ctx context.Context, tx pgx.Tx, key string, fence int64, value []byte) error {
	if tx == nil {
		return errors.New("jobfence: idempotency: PutTx: tx is nil")
	}
	return r.put(ctx, tx, key, fence, value)
}

func (r *ResultStore) put(ctx context.Context, q querier, key string, fence int64, value []byte) error {
	if err := validKey("key", key); err != nil {
		return err
	}
	if err := validKey("scope", r.scope); err != nil {
		return err
	}
	tag, err := q.Exec(ctx, putResultSQL, r.scope, key, fence, value)
	if err != nil {
		return fmt.Errorf("idempotency: put result %q: %w", key, err)
	}
	if tag.RowsAffected() == 0 {
		return &StaleFenceError{Scope: r.scope, Key: key, Fence: fence}
	}
	return nil
}

// Get returns key's stored result, or ErrResultNotFound.
func (r *ResultStore) Get(ctx context.Context, key string) (*Result, error) {
	if err := validKey("key", key); err != nil {
		return nil, err
	}
	res := &Result{Key: key}
	err := r.pool.QueryRow(ctx, getResultSQL, r.scope, key).Scan(&res.Fence, &res.Value, &res.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("idempotency: result %q (scope %q): %w", key, r.scope, ErrResultNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("idempotency: get result %q: %w", key, err)
	}
	return res, nil
}

// Prune deletes up to limit results of the store's scope last written more
// than retention ago and reports how many it deleted; limit zero or less
// means DefaultPruneLimit. A pruned key accepts any fence again, so keep
// results longer than a stale owner can stay paused.
func (r *ResultStore) Prune(ctx context.Context, retention time.Duration, limit int) (int, error) {
	if limit <= 0 {
		limit = DefaultPruneLimit
	}
	if retention < 0 {
		return 0, fmt.Errorf("jobfence: idempotency: Prune: negative retention %s", retention)
	}
	tag, err := r.pool.Exec(ctx, pruneResultsSQL, r.scope, retention.Microseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("idempotency: prune results: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
