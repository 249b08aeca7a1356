package idempotency

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// MaxKeyLen is the longest key, and the longest scope, in bytes.
const MaxKeyLen = 1024

// State is the state of a stored idempotency key.
type State string

// The states of a key.
const (
	// StateInProgress: a caller holds the key and is running the operation.
	StateInProgress State = "in_progress"
	// StateCompleted: the operation finished and its response is stored.
	StateCompleted State = "completed"
)

// Store runs operations at most once per idempotency key and replays their
// stored responses to retries. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	opts Options
}

// New returns a Store on pool. The pool's database must have jobfence's
// migrations applied. New panics if pool is nil.
func New(pool *pgxpool.Pool, opts Options) *Store {
	if pool == nil {
		panic("idempotency: New: nil pool")
	}
	return &Store{pool: pool, opts: opts.withDefaults()}
}

// Scope returns the Store's scope.
func (s *Store) Scope() string { return s.opts.Scope }

// WithScope returns a Store that shares s's pool and options but keeps its
// keys in scope, for example one per tenant. An empty scope means
// DefaultScope.
func (s *Store) WithScope(scope string) *Store {
	o := s.opts
	o.Scope = scope
	return &Store{pool: s.pool, opts: o.withDefaults()}
}

// querier is what the key statements need: a pool or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// claimKeySQL takes a key: it inserts it in progress under a new fence, or
// takes over a stored key that is free to take (a completed key past its
// expiry, or an in-progress key whose holder's lease ran out). A key that is
// not free returns no row. clock_timestamp is used throughout because now()
// stands still inside a transaction.
const claimKeySQL = `
INSERT INTO jobfence_idempotency_keys AS k
    (scope, key, fingerprint, state, fence, lease_expires_at, created_at, expires_at)
VALUES ($1, $2, $3, 'in_progress', nextval('jobfence_fence_seq'),
    clock_timestamp() + $4::bigint * interval '1 microsecond', clock_timestamp(),
    clock_timestamp() + $5::bigint * interval '1 microsecond')
ON CONFLICT (scope, key) DO UPDATE SET
    fingerprint      = EXCLUDED.fingerprint,
    state            = 'in_progress',
    fence            = EXCLUDED.fence,
    lease_expires_at = clock_timestamp() + $4::bigint * interval '1 microsecond',
    response         = NULL,
    created_at       = clock_timestamp(),
    completed_at     = NULL,
    expires_at       = clock_timestamp() + $5::bigint * interval '1 microsecond'
WHERE (k.state = 'completed' AND k.expires_at <= clock_timestamp())
   OR (k.state = 'in_progress' AND k.lease_expires_at <= clock_timestamp()
       AND (k.fingerprint = EXCLUDED.fingerprint OR k.expires_at <= clock_timestamp()))
RETURNING k.fence, k.xmax::text <> '0' AS took_over,
    k.lease_expires_at < clock_timestamp() + ($4::bigint / 2) * interval '1 microsecond' AS short_lease`

// The update path above computes its times after any wait for the row's
// lock; the insert path's VALUES are computed before a wait on a concurrent
// insert of the same key, so a claim that waited long can come back with
// little or no lease left. short_lease reports that, and the claimer
// extends the lease under its fence before it runs fn; otherwise another
// caller could take the key over while fn runs.

// loadKeySQL reads a key that claimKeySQL could not take.
const loadKeySQL = `
SELECT fingerprint, state, fence, response, lease_expires_at, created_at, completed_at, expires_at,
       expires_at <= clock_timestamp() AS expired,
       coalesce(lease_expires_at <= clock_timestamp(), false) AS lease_expired
FROM jobfence_idempotency_keys
WHERE scope = $1 AND key = $2`

// completeKeySQL stores the response, only for the holder of the current fence.
const completeKeySQL = `
UPDATE jobfence_idempotency_keys
SET state = 'completed', response = $4, completed_at = clock_timestamp(), lease_expires_at = NULL,
    expires_at = clock_timestamp() + $5::bigint * interval '1 microsecond'
WHERE scope = $1 AND key = $2 AND fence = $3 AND state = 'in_progress'`

// releaseKeySQL gives up a key whose operation failed, so a retry runs it.
const releaseKeySQL = `
DELETE FROM jobfence_idempotency_keys
WHERE scope = $1 AND key = $2 AND fence = $3 AND state = 'in_progress'`

// extendLeaseSQL is the heartbeat of an in-progress key.
const extendLeaseSQL = `
UPDATE jobfence_idempotency_keys
SET lease_expires_at = clock_timestamp() + $4::bigint * interval '1 microsecond'
WHERE scope = $1 AND key = $2 AND fence = $3 AND state = 'in_progress'`

// Record is a stored idempotency key as Lookup reports it.
type Record struct {
	Scope       string
	Key         string
	Fingerprint string
	State       State
	// Fence is the fence of the key's latest holder.
	Fence int64
	// Response is the stored response of a completed key.
	Response []byte
	// LeaseExpiresAt is when an in-progress holder's lease runs out; zero
	// for a completed key.
	LeaseExpiresAt time.Time
	CreatedAt      time.Time
	// CompletedAt is zero for a key in progress.
	CompletedAt time.Time
	// ExpiresAt is when the key stops protecting retries and may be pruned.
	ExpiresAt time.Time

	expired      bool
	leaseExpired bool
}

// ErrKeyNotFound reports a key that Lookup found no record of.
var ErrKeyNotFound = errors.New("jobfence: idempotency key not found")

// Lookup returns the stored record of key, or ErrKeyNotFound.
func (s *Store) Lookup(ctx context.Context, key string) (*Record, error) {
	if err := validKey("key", key); err != nil {
		return nil, err
	}
	return s.load(ctx, s.pool, key)
}

func (s *Store) load(ctx context.Context, q querier, key string) (*Record, error) {
	r := &Record{Scope: s.opts.Scope, Key: key}
	var state string
	var lease, completed *time.Time
	err := q.QueryRow(ctx, loadKeySQL, s.opts.Scope, key).Scan(&r.Fingerprint, &state, &r.Fence, &r.Response,
		&lease, &r.CreatedAt, &completed, &r.ExpiresAt, &r.expired, &r.leaseExpired)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrKeyNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("idempotency: load key %q: %w", key, err)
	}
	r.State = State(state)
	if lease != nil {
		r.LeaseExpiresAt = *lease
	}
	if completed != nil {
		r.CompletedAt = *completed
	}
	return r, nil
}

// claim is the outcome of claimKey: either the caller holds the key under
// fence, or the key is completed and response is what to replay.
type claim struct {
	fence    int64
	replayed bool
	response []byte
}

// claimKey takes key for the caller or finds its stored response. It returns
// a *KeyReusedError for a different fingerprint and an *InProgressError for
// a key held by a live caller (or waits, with WaitForInProgress).
//
// Each claim attempt takes a value of the fence sequence even when it finds
// the key taken, so a waiting caller reads the key and attempts the claim
// only once the key looks free.
//
// With readFirst (inside a caller's transaction) it reads the key before
// trying to claim it: the claim's upsert locks an existing row even when it
// changes nothing, and in a transaction that lock would last until the
// caller commits, blocking every other caller of a key that is only being
// replayed.
func (s *Store) claimKey(ctx context.Context, q querier, key, fingerprint string, readFirst bool) (claim, error) {
	attempt, waiting := !readFirst, false
	for {
		if attempt {
			var c claim
			var tookOver, short bool
			err := q.QueryRow(ctx, claimKeySQL, s.opts.Scope, key, fingerprint,
				s.opts.Lease.Microseconds(), s.opts.Retention.Microseconds()).Scan(&c.fence, &tookOver, &short)
			if err == nil && short {
				tag, xerr := q.Exec(ctx, extendLeaseSQL, s.opts.Scope, key, c.fence, s.opts.Lease.Microseconds())
				if xerr != nil {
					return claim{}, fmt.Errorf("idempotency: claim key %q: extend lease: %w", key, xerr)
				}
				if tag.RowsAffected() == 0 {
					// Taken over between the claim and the extension: read
					// the key again and treat it as someone else's.
					attempt = false
					continue
				}
			}
			if err == nil {
				if tookOver {
					s.opts.Logger.LogAttrs(ctx, slogInfo, "idempotency: took over a key whose holder's lease ran out, or that had expired",
						attrScope(s.opts.Scope), attrKey(key), attrFence(c.fence))
				}
				return c, nil
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return claim{}, fmt.Errorf("idempotency: claim key %q: %w", key, err)
			}
		}
		attempt = true
		r, err := s.load(ctx, q, key)
		if errors.Is(err, ErrKeyNotFound) {
			continue // deleted since the claim looked: claim again
		}
		if err != nil {
			return claim{}, err
		}
		if r.expired && (r.State == StateCompleted || r.leaseExpired) {
			continue // free since the claim looked: claim again
		}
		if r.Fingerprint != fingerprint {
			return claim{}, &KeyReusedError{Scope: s.opts.Scope, Key: key}
		}
		if r.State == StateCompleted {
			return claim{replayed: true, response: r.Response}, nil
		}
		if r.leaseExpired {
			continue
		}
		if !s.opts.WaitForInProgress {
			return claim{}, &InProgressError{Scope: s.opts.Scope, Key: key, LeaseExpiresAt: r.LeaseExpiresAt}
		}
		if !waiting {
			waiting = true
			s.opts.Logger.LogAttrs(ctx, slogDebug, "idempotency: waiting for key in progress",
				attrScope(s.opts.Scope), attrKey(key), attrFence(r.Fence))
		}
		attempt = false
		t := time.NewTimer(s.opts.PollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return claim{}, fmt.Errorf("idempotency: waiting for key %q in progress: %w", key, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// Do runs fn at most once per key among the calls that agree on fingerprint
// and returns its response; every later call with the same key, while the
// key is retained, returns the stored response without running fn.
//
// fingerprint identifies the request (for example a hash of its body; see
// Fingerprint). A call with the key of a different fingerprint returns a
// *KeyReusedError (ErrKeyReused) and does not run fn. A call that finds the
// key held by another live caller returns an *InProgressError
// (ErrInProgress), or waits for that caller's response when
// Options.WaitForInProgress is set.
//
// fn runs with the key held under a fence, which FenceFrom(ctx) returns;
// fence fn's own database writes with it (see Fenced). While fn runs Do
// extends the key's lease; if the lease is lost anyway (the process was
// paused past it and another caller took the key over under a greater
// fence), fn's ctx is cancelled and Do returns a *StaleFenceError
// (ErrStaleFence; joined with fn's error if fn failed) without storing fn's
// response: the newer holder's response is the one retries get.
//
// When fn returns an error Do deletes the key, so the next call runs fn
// again, and returns that error unchanged. To remember a failure, return it
// as a response instead.
func (s *Store) Do(ctx context.Context, key, fingerprint string, fn func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	if err := s.validate(key, fingerprint); err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, errors.New("jobfence: idempotency: Do: fn is nil")
	}
	c, err := s.claimKey(ctx, s.pool, key, fingerprint, false)
	if err != nil {
		return nil, err
	}
	if c.replayed {
		return c.response, nil
	}
	return s.run(ctx, key, c.fence, fn)
}

// run calls fn while holding key under fence and stores its response.
func (s *Store) run(ctx context.Context, key string, fence int64, fn func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	stale := &StaleFenceError{Scope: s.opts.Scope, Key: key, Fence: fence}
	fnCtx, cancel := context.WithCancelCause(withFence(ctx, fence))
	defer cancel(nil)
	stopHeartbeat := s.heartbeat(ctx, key, fence, func() { cancel(stale) })

	// The cleanup statements run even when the caller's ctx is done: the
	// key must be completed or released either way.
	cleanup := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), s.opts.Lease)
	}
	returned := false
	defer func() {
		if !returned { // fn panicked: let the next call run it
			stopHeartbeat()
			cleanupCtx, cancel := cleanup()
			defer cancel()
			s.release(cleanupCtx, key, fence)
		}
	}()
	resp, err := fn(fnCtx)
	returned = true
	lost := stopHeartbeat()
	cleanupCtx, cleanupCancel := cleanup()
	defer cleanupCancel()
	if lost {
		s.opts.Logger.LogAttrs(ctx, slogWarn, "idempotency: lease lost while running; response not stored",
			attrScope(s.opts.Scope), attrKey(key), attrFence(fence))
		if err != nil {
			return nil, errors.Join(stale, err)
		}
		return nil, stale
	}
	if err != nil {
		s.release(cleanupCtx, key, fence)
		return nil, err
	}
	tag, err := s.pool.Exec(cleanupCtx, completeKeySQL, s.opts.Scope, key, fence, resp, s.opts.Retention.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("idempotency: complete key %q: %w", key, err)
	}
	if tag.RowsAffected() == 0 {
		s.opts.Logger.LogAttrs(ctx, slogWarn, "idempotency: stale completion rejected; a newer holder took the key over",
			attrScope(s.opts.Scope), attrKey(key), attrFence(fence))
		return nil, stale
	}
	return resp, nil
}

// release deletes key if fence still holds it; a failure is logged, and the
// key then frees itself when its lease runs out.
func (s *Store) release(ctx context.Context, key string, fence int64) {
	if _, err := s.pool.Exec(ctx, releaseKeySQL, s.opts.Scope, key, fence); err != nil {
		s.opts.Logger.LogAttrs(ctx, slogWarn, "idempotency: release key failed; it frees itself when its lease runs out",
			attrScope(s.opts.Scope), attrKey(key), attrFence(fence), attrErr(err))
	}
}

// heartbeat extends key's lease every Options.Heartbeat until the returned
// stop is called; stop reports whether the lease was found lost, in which
// case lost was called as soon as that was seen.
func (s *Store) heartbeat(ctx context.Context, key string, fence int64, lost func()) (stop func() bool) {
	if s.opts.Heartbeat < 0 {
		return func() bool { return false }
	}
	hbCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	exited := make(chan struct{})
	var isLost bool
	go func() {
		defer close(exited)
		t := time.NewTicker(s.opts.Heartbeat)
		defer t.Stop()
		// held is how long the lease surely holds: the claim's lease, then
		// each successful extension's. A holder that cannot reach the
		// database cannot prove it still holds the key once that passes,
		// and another caller may take it over, so fn is told to stop.
		held := time.Now().Add(s.opts.Lease)
		for {
			select {
			case <-hbCtx.Done():
				return
			case <-t.C:
			}
			sent := time.Now()
			tag, err := s.pool.Exec(hbCtx, extendLeaseSQL, s.opts.Scope, key, fence, s.opts.Lease.Microseconds())
			if err != nil {
				if hbCtx.Err() != nil {
					return
				}
				s.opts.Logger.LogAttrs(ctx, slogWarn, "idempotency: extend lease failed",
					attrScope(s.opts.Scope), attrKey(key), attrFence(fence), attrErr(err))
				if time.Now().After(held) {
					isLost = true
					lost()
					return
				}
				continue
			}
			held = sent.Add(s.opts.Lease)
			if tag.RowsAffected() == 0 {
				isLost = true
				lost()
				return
			}
		}
	}()
	return func() bool {
		cancel()
		<-exited
		return isLost
	}
}

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

func (s *Store) validate(key, fingerprint string) error {
	if err := validKey("scope", s.opts.Scope); err != nil {
		return err
	}
	if err := validKey("key", key); err != nil {
		return err
	}
	if !validText(fingerprint) {
		return fmt.Errorf("%w: fingerprint is not valid UTF-8 text without NUL bytes", ErrInvalidKey)
	}
	return nil
}

// validKey checks a key or scope: non-empty, at most MaxKeyLen bytes, text
// Postgres can store.
func validKey(what, k string) error {
	switch {
	case k == "":
		return fmt.Errorf("%w: %s is empty", ErrInvalidKey, what)
	case len(k) > MaxKeyLen:
		return fmt.Errorf("%w: %s is %d bytes long, more than MaxKeyLen (%d)", ErrInvalidKey, what, len(k), MaxKeyLen)
	case !validText(k):
		return fmt.Errorf("%w: %s is not valid UTF-8 text without NUL bytes", ErrInvalidKey, what)
	}
	return nil
}

func validText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}
