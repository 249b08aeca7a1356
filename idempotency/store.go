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

	// afterComplete, when set by a test, runs in DoTx right after the key
	// was completed, before the caller can commit.
	afterComplete func()
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
	// held is how long the lease surely holds by this host's clock: Lease
	// after the statement that set it was sent. The database computed the
	// lease's end after it received that statement, so this is never later
	// than the end it stored, however slow the reply was.
	held time.Time
}

// claimKey takes key for the caller or finds its stored response. It returns
// a *KeyReusedError for a different fingerprint and an *InProgressError for
// a key held by a live caller (or waits, with WaitForInProgress).
//
// Each claim attempt takes a value of the fence sequence even when it finds
// the key taken, so a waiting caller reads the key and attempts the claim
// only once the key looks free.
//
// With inTx (inside a caller's transaction) it reads the key before trying
// to claim it: the claim's upsert locks an existing row even when it
// changes nothing, and in a transaction that lock would last until the
// caller commits, blocking every other caller of a key that is only being
// replayed. With inTx the statement that takes the key also bounds the
// caller's transaction by the lease, and so does one that finds it taken
// (see claimKeyTxSQL).
func (s *Store) claimKey(ctx context.Context, q querier, key, fingerprint string, inTx bool) (claim, error) {
	claimSQL, extendSQL := claimKeySQL, extendLeaseSQL
	if inTx {
		claimSQL, extendSQL = claimKeyTxSQL, extendLeaseTxSQL
	}
	attempt, waiting := !inTx, false
	for {
		if attempt {
			var c claim
			var tookOver, short bool
			taken := true
			sent := time.Now()
			dest := []any{&c.fence, &tookOver, &short}
			if inTx {
				dest = append(dest, &taken, nil, nil) // nil: the bounds set_config returns
			}
			err := q.QueryRow(ctx, claimSQL, s.opts.Scope, key, fingerprint,
				s.opts.Lease.Microseconds(), s.opts.Retention.Microseconds()).Scan(dest...)
			if err == nil && !taken {
				err = pgx.ErrNoRows
			}
			if err == nil && short {
				sent = time.Now()
				tag, xerr := q.Exec(ctx, extendSQL, s.opts.Scope, key, c.fence, s.opts.Lease.Microseconds())
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
				c.held = sent.Add(s.opts.Lease)
				if tookOver {
					s.opts.Logger.LogAttrs(ctx, slogInfo, "idempotency: took over a key whose holder's lease ran out, or that had expired",
						attrScope(s.opts.Scope), attrKey(key), attrFence(c.fence))
					s.event(ctx, EventTakeover, key)
				} else {
					s.event(ctx, EventRun, key)
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
			s.event(ctx, EventKeyReused, key)
			return claim{}, &KeyReusedError{Scope: s.opts.Scope, Key: key}
		}
		if r.State == StateCompleted {
			s.event(ctx, EventReplay, key)
			return claim{replayed: true, response: r.Response}, nil
		}
		if r.leaseExpired {
			continue
		}
		if !s.opts.WaitForInProgress {
			s.event(ctx, EventInProgress, key)
			return claim{}, &InProgressError{Scope: s.opts.Scope, Key: key, LeaseExpiresAt: r.LeaseExpiresAt}
		}
		if !waiting {
			waiting = true
			s.event(ctx, EventInProgress, key)
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
