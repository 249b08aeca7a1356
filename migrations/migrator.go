package migrations

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	// Also registers pgx's database/sql driver as "pgx".
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
)

// Defaults of Migrator's fields.
const (
	// DefaultLockWait is how long a migrator waits for another migrator
	// of the same schema.
	DefaultLockWait = 5 * time.Minute
	// DefaultAttempts is how many times a migration step that could not
	// take a table lock within its lock_timeout is tried.
	DefaultAttempts = 20
	// DefaultBackoff is the wait before a step's first retry; it doubles
	// at each retry up to maxBackoff.
	DefaultBackoff = 500 * time.Millisecond
)

// maxBackoff caps the wait between two tries of a step.
const maxBackoff = 10 * time.Second

// The errors after which a migration step is tried again: it waited for
// a lock longer than its lock_timeout (lock_not_available), or it was
// chosen to end a deadlock (deadlock_detected: two concurrent index
// builds with predicates, in two schemas, can wait for each other's
// snapshots).
const (
	sqlstateLockNotAvailable = "55P03"
	sqlstateDeadlockDetected = "40P01"
)

// applicationName names the migrator's connections in pg_stat_activity
// (unless the URL names them), so that the holder of the migration lock
// can be told apart.
const applicationName = "jobfence migrate"

// ErrLocked is wrapped by the error of a migrator that gave up waiting
// for another migrator of the same schema.
var ErrLocked = errors.New("another migration of this schema holds the migration lock")

// LockedError reports a migrator that gave up waiting for the migration
// lock. errors.Is(err, ErrLocked) reports true for it.
type LockedError struct {
	// Schema is the schema being migrated.
	Schema string
	// LockID is the advisory lock's key (LockID(Schema)).
	LockID int64
	// Waited is how long the migrator waited.
	Waited time.Duration
	// HolderPID is the server process of the session that holds the lock,
	// 0 when it was released as the migrator gave up.
	HolderPID int
	// Holder describes that session: application, client address, state
	// and since when (what pg_stat_activity shows this role).
	Holder string
}

func (e *LockedError) Error() string {
	msg := fmt.Sprintf("another migration of schema %q holds jobfence's migration lock (advisory lock %d): gave up after %s",
		e.Schema, e.LockID, e.Waited.Round(time.Millisecond))
	if e.HolderPID == 0 {
		return msg + "; it was released meanwhile: run again"
	}
	return msg + fmt.Sprintf("; it is held by server process %d (%s): if that migration is not running any more (its process frozen or gone), end its session with SELECT pg_terminate_backend(%d) and run again",
		e.HolderPID, e.Holder, e.HolderPID)
}

// Is reports whether target is ErrLocked.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// LockID is the key of the advisory lock that Migrator holds while it
// migrates schema: a hash of the schema's name, so that migrators of one
// schema take turns and those of different schemas (or a service's own
// goose, which uses goose's default key) do not wait for each other.
func LockID(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("jobfence migrations\x00" + schema))
	return int64(h.Sum64())
}

// Migrator applies and rolls back jobfence's migrations on a database that
// a running fleet uses.
//
// Migrators of one schema take turns: each holds an advisory lock
// (LockID) while it runs, and one that waited LockWait for it gives up
// with a *LockedError naming the holder. The lock is transaction-level,
// held by a transaction of the migrator's own for as long as it runs, so
// it also holds through PgBouncer in transaction mode; that transaction
// takes no snapshot and no table lock, so the concurrent index builds
// do not wait for it.
//
// Every statement of the migrations that takes a lock which stops the
// fleet's reads or writes does so under a lock_timeout of 1 s, so that
// the fleet never queues behind it for longer; the step (one migration)
// that hit it is tried again, after a backoff, up to Attempts times, each
// retry logged. Indexes on existing tables are built CONCURRENTLY and
// data is rewritten in batches of short transactions.
//
// The zero Migrator uses the defaults.
type Migrator struct {
	// LockWait bounds the wait for another migrator of the schema.
	// Zero means DefaultLockWait.
	LockWait time.Duration
	// Attempts bounds the tries of a step that hit lock_timeout. Zero
	// means DefaultAttempts.
	Attempts int
	// Backoff is the wait before a step's first retry; it doubles at each
	// retry up to 10 s. Zero means DefaultBackoff.
	Backoff time.Duration
	// Log receives one warning per retry. Nil means slog.Default().
	Log *slog.Logger
}

// Up applies every pending migration.
func (m Migrator) Up(ctx context.Context, databaseURL string) error {
	return m.run(ctx, databaseURL, "up", func(ctx context.Context, p *goose.Provider) error {
		_, err := p.Up(ctx)
		return err
	})
}

// Down rolls back the most recent migration. When none is applied it
// returns an error wrapping ErrNothingToRollBack.
func (m Migrator) Down(ctx context.Context, databaseURL string) error {
	err := m.run(ctx, databaseURL, "down", func(ctx context.Context, p *goose.Provider) error {
		_, err := p.Down(ctx)
		return err
	})
	if errors.Is(err, goose.ErrNoNextVersion) {
		return fmt.Errorf("migrations: down: %w", ErrNothingToRollBack)
	}
	return err
}

// Reset rolls back every applied migration, dropping jobfence's tables.
func (m Migrator) Reset(ctx context.Context, databaseURL string) error {
	return m.run(ctx, databaseURL, "reset", func(ctx context.Context, p *goose.Provider) error {
		_, err := p.DownTo(ctx, 0)
		return err
	})
}

// run opens a locked provider on databaseURL and runs step until it
// succeeds, fails for another reason than lock_timeout or a deadlock, or
// has been tried Attempts times for the same migration. A step that failed
// so changed nothing it does not redo: a migration in a transaction rolled
// back, and one outside (NO TRANSACTION) is written so that each statement
// may run again.
func (m Migrator) run(ctx context.Context, databaseURL, what string, step func(context.Context, *goose.Provider) error) error {
	db, err := openDB(databaseURL)
	if err != nil {
		return fmt.Errorf("migrations: %s: %w", what, err)
	}
	defer db.Close()
	var schema sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return fmt.Errorf("migrations: %s: %w", what, err)
	}
	locker := &txLocker{db: db, schema: schema.String, id: LockID(schema.String), wait: m.lockWait()}
	p, err := NewProvider(db, goose.WithSessionLocker(locker))
	if err != nil {
		return err
	}
	attempts, backoff := m.Attempts, m.Backoff
	if attempts <= 0 {
		attempts = DefaultAttempts
	}
	if backoff <= 0 {
		backoff = DefaultBackoff
	}
	log := m.Log
	if log == nil {
		log = slog.Default()
	}
	failed, tries := int64(-1), 0
	for {
		err := step(ctx, p)
		var pe *goose.PartialError
		if err == nil || !errors.As(err, &pe) || !isRetryable(err) {
			if err != nil {
				return fmt.Errorf("migrations: %s: %w", what, err)
			}
			return nil
		}
		// Count the tries of each migration: one that got through was
		// progress, and the next one gets its own tries.
		if v := pe.Failed.Source.Version; v != failed {
			failed, tries = v, 0
		}
		tries++
		source := pe.Failed.Source.Path
		if tries >= attempts {
			return fmt.Errorf("migrations: %s: %s: gave up after %d tries, each of which waited for a lock as long as its lock_timeout: a transaction keeps jobfence's tables locked for longer (find it with %s), end it and run again: %w",
				what, source, tries, longTransactionsSQL, err)
		}
		wait := backoff << (tries - 1)
		if wait > maxBackoff || wait <= 0 {
			wait = maxBackoff
		}
		log.WarnContext(ctx, "migrations: the migration waited for a lock past its lock_timeout or lost a deadlock; trying it again",
			"direction", what, "migration", source, "try", tries, "of", attempts, "retry_in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("migrations: %s: %s: %w", what, source, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// longTransactionsSQL finds the transactions that may keep a migration
// from its lock, oldest first.
const longTransactionsSQL = "SELECT pid, state, xact_start, query FROM pg_stat_activity WHERE xact_start < now() - interval '1 second' ORDER BY xact_start"

func (m Migrator) lockWait() time.Duration {
	if m.LockWait <= 0 {
		return DefaultLockWait
	}
	return m.LockWait
}

// isLockNotAvailable reports whether err is a statement that waited for
// a lock past its lock_timeout.
func isLockNotAvailable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == sqlstateLockNotAvailable
}

// isRetryable reports whether a migration step that failed with err may
// be tried again: it waited too long for a lock, or lost a deadlock.
func isRetryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == sqlstateLockNotAvailable || pgErr.Code == sqlstateDeadlockDetected)
}

// openDB opens databaseURL through pgx's database/sql driver, naming its
// connections applicationName unless the URL names them.
func openDB(databaseURL string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	if _, ok := cfg.RuntimeParams["application_name"]; !ok {
		cfg.RuntimeParams["application_name"] = applicationName
	}
	return stdlib.OpenDB(*cfg), nil
}

// txLocker is the goose session locker of a Migrator: a transaction of its
// own, on a connection of its own, holds a transaction-level advisory
// lock while goose migrates on its connection. A session-level lock would
// not hold through PgBouncer in transaction mode (taken on one server
// connection, released on another), and jobfence takes no session-level
// locks.
type txLocker struct {
	db     *sql.DB
	schema string
	id     int64
	wait   time.Duration
	tx     *sql.Tx
}

// lockSQL takes the lock, waiting for it as long as lock_timeout (%d, in
// ms); the other settings keep the holder's transaction, idle while goose
// migrates, from being ended by the server's
// idle_in_transaction_session_timeout in a long index build, and the
// keepalives end it within about two minutes when the migrator's host is
// gone. All are local to the transaction. %d is the lock's key.
//
// It has no parameters, so pgx sends it as a simple query, whose portal,
// and the snapshot the portal holds, is gone when it returns: a
// transaction with a snapshot would hold back every concurrent index
// build, the migration's own included, for as long as it is open.
const lockSQL = `SELECT set_config('lock_timeout', '%d', true),
       set_config('idle_in_transaction_session_timeout', '0', true),
       set_config('tcp_keepalives_idle', '60', true),
       set_config('tcp_keepalives_interval', '10', true),
       set_config('tcp_keepalives_count', '6', true);
SELECT pg_advisory_xact_lock(%d)`

// SessionLock waits up to l.wait for the lock. The connection goose
// passes is not used: the lock lives in l's transaction.
func (l *txLocker) SessionLock(ctx context.Context, _ *sql.Conn) error {
	start := time.Now()
	// The transaction is bound to ctx: when the caller gives up, it rolls
	// back and the lock goes with it.
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migration lock: %w", err)
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(lockSQL, max(l.wait.Milliseconds(), 1), l.id)); err != nil {
		_ = tx.Rollback()
		if isLockNotAvailable(err) {
			return l.lockedError(ctx, time.Since(start))
		}
		return fmt.Errorf("migration lock: %w", err)
	}
	l.tx = tx
	return nil
}

// SessionUnlock ends the lock's transaction. It writes nothing, so a
// rollback is as good as a commit.
func (l *txLocker) SessionUnlock(context.Context, *sql.Conn) error {
	tx := l.tx
	l.tx = nil
	if tx == nil {
		return nil
	}
	if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("migration lock: release: %w", err)
	}
	return nil
}

// holderSQL finds the session that holds advisory lock ($1 << 32 | $2)
// in the current database.
const holderSQL = `
SELECT l.pid,
       format('application %L, from %s, %s since %s', coalesce(a.application_name, ''),
              coalesce(host(a.client_addr), 'a local socket'), coalesce(a.state, 'state unknown'),
              coalesce(to_char(a.state_change, 'YYYY-MM-DD HH24:MI:SS TZ'), 'unknown'))
FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid::bigint = $1 AND l.objid::bigint = $2
LIMIT 1`

// lockedError describes who holds the lock that l waited for.
func (l *txLocker) lockedError(ctx context.Context, waited time.Duration) error {
	e := &LockedError{Schema: l.schema, LockID: l.id, Waited: waited}
	key := uint64(l.id)
	err := l.db.QueryRowContext(ctx, holderSQL, int64(key>>32), int64(key&0xffffffff)).Scan(&e.HolderPID, &e.Holder)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w (and looking up its holder failed: %v)", e, err)
	}
	return e
}
