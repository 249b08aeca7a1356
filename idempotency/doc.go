// Package idempotency makes retried operations take effect once, and makes
// the late writes of an owner that lost its claim change nothing.
//
// # Idempotency keys
//
// A Store runs an operation at most once per key and replays its stored
// response to every retry, in the manner of Stripe's Idempotency-Key header:
//
//	store := idempotency.New(pool, idempotency.Options{Scope: "charge"})
//	resp, err := store.Do(ctx, req.IdempotencyKey, fingerprint, func(ctx context.Context) ([]byte, error) {
//		return charge(ctx, req)
//	})
//
// A key is in progress while one caller runs the operation and completed once
// the response is stored. The same key with a different request fingerprint
// is refused with ErrKeyReused; a call that finds the key in progress gets
// ErrInProgress, or waits for the response (Options.WaitForInProgress).
//
// The caller running the operation holds the key under a fence, a value of
// the same Postgres sequence that fences job claims, and a lease that Do
// extends while the operation runs. If the caller stops (its process dies or
// is paused past the lease), the next call takes the key over under a
// greater fence; the stopped caller's completion is then refused with
// ErrStaleFence. Inside the operation, FenceFrom(ctx) returns the fence so
// the operation can fence its own writes. The lease bounds a caller that
// cannot reach the database too: Do cancels the operation's ctx when the
// lease runs out unextended, before another caller can take the key over.
//
// DoTx runs the operation inside the caller's transaction: the key, the
// operation's writes and the stored response commit together, which makes
// the operation's database effects exactly-once. The lease bounds that
// transaction: PostgreSQL ends it if it sits idle past the lease, so a
// frozen caller cannot hold the key. Do cannot promise that for
// effects outside the database; see docs/outside-calls.md.
//
// # Fenced writes
//
// A ResultStore keeps one result per key and applies a write only when no
// greater fence has written the key. Fenced turns any conditional write of
// the caller's own into ErrStaleFence when it changed no row. ErrStaleFence
// is queue.ErrStaleFence, so one errors.Is test serves jobs, keys and results.
//
// # Expiry
//
// A completed key protects retries for Options.Retention; Prune (or
// RunPruner) deletes expired keys in bounded batches.
//
// See docs/outside-calls.md.
package idempotency
