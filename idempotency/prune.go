package idempotency

import (
	"context"
	"fmt"
	"time"
)

// DefaultPruneLimit is the batch size of Prune when its limit is zero or less.
const DefaultPruneLimit = 1000

// pruneKeysSQL deletes up to $1 expired keys of any scope. A key in progress
// is kept while its holder's lease runs; SKIP LOCKED lets any number of
// instances prune at once.
const pruneKeysSQL = `
DELETE FROM jobfence_idempotency_keys k
USING (
    SELECT scope, key FROM jobfence_idempotency_keys
    WHERE expires_at <= clock_timestamp()
      AND (state = 'completed' OR lease_expires_at <= clock_timestamp())
    ORDER BY expires_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
) d
WHERE k.scope = d.scope AND k.key = d.key`

// Prune deletes up to limit expired keys, of every scope, and reports how
// many it deleted; limit zero or less means DefaultPruneLimit. A key expires
// Options.Retention after it was completed (or claimed, for a key whose
// holder died); an expired key no longer protects retries whether or not it
// has been pruned. Any number of instances may prune at once.
func (s *Store) Prune(ctx context.Context, limit int) (int, error) {
	if limit <= 0 {
		limit = DefaultPruneLimit
	}
	tag, err := s.pool.Exec(ctx, pruneKeysSQL, limit)
	if err != nil {
		return 0, fmt.Errorf("idempotency: prune keys: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// RunPruner prunes expired keys until ctx ends: it deletes batches of
// DefaultPruneLimit while full batches come back, then waits every (zero or
// less means one minute) before looking again. Errors are logged and retried
// at the next round. It returns ctx's error.
func (s *Store) RunPruner(ctx context.Context, every time.Duration) error {
	if every <= 0 {
		every = time.Minute
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		for {
			n, err := s.Prune(ctx, DefaultPruneLimit)
			if err != nil {
				if ctx.Err() == nil {
					s.opts.Logger.LogAttrs(ctx, slogWarn, "idempotency: prune failed", attrErr(err))
				}
				break
			}
			if n < DefaultPruneLimit {
				break
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
