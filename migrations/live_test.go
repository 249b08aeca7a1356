package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/migrations"
)

// The fleet's bounds while a migration runs: no statement of the fleet
// waits longer than maxWait, and a lease lasts leaseFor, renewed every
// beatEvery, so a heartbeat that waited maxWait still renews it in time.
// holdFor is how long a transaction holds the jobs table, long enough
// that a statement queued behind it without a lock_timeout makes the fleet
// wait longer than maxWait.
const (
	maxWait   = 2 * time.Second
	leaseFor  = 3 * time.Second
	beatEvery = 50 * time.Millisecond
	holdFor   = 3 * time.Second
)

// liveMigrator is a Migrator with the test's bounds: retries 100 ms
// apart at first, logged to the test.
func liveMigrator(t *testing.T) migrations.Migrator {
	return migrations.Migrator{LockWait: time.Minute, Backoff: 100 * time.Millisecond, Log: slog.New(slog.NewTextHandler(testWriter{t}, nil))}
}

// testWriter writes a log line to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// migrationFiles counts the migration files (versions may skip a number).
func migrationFiles(t *testing.T) int {
	t.Helper()
	sources, err := migrations.FS.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range sources {
		if strings.HasSuffix(s.Name(), ".sql") {
			n++
		}
	}
	return n
}

// latestVersion is the highest version among the migration files.
func latestVersion(t *testing.T) int64 {
	t.Helper()
	sources, err := migrations.FS.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var latest int64
	for _, s := range sources {
		var v int64
		if _, err := fmt.Sscanf(s.Name(), "%05d_", &v); err == nil && strings.HasSuffix(s.Name(), ".sql") && v > latest {
			latest = v
		}
	}
	return latest
}

// The fleet's statements, as pgqueue's in shape (see DESIGN.md), on the
// columns of version 1 so that they run against every version: an
// enqueue, a claim that takes a fence and a lease, and fenced heartbeats
// and completions that find no row once the lease has run out.
const (
	fleetEnqueueSQL = `INSERT INTO jobfence_jobs (queue, kind) SELECT 'fleet', 'k' FROM generate_series(1, 5)`
	fleetClaimSQL   = `
WITH next AS (
    SELECT id FROM jobfence_jobs
    WHERE state = 'available' AND queue = 'fleet' AND scheduled_at <= now()
    ORDER BY priority, scheduled_at, id LIMIT 10 FOR UPDATE SKIP LOCKED)
UPDATE jobfence_jobs j SET state = 'running', attempt = attempt + 1, fence = nextval('jobfence_fence_seq'),
    lease_expires_at = now() + $1::interval, attempted_at = now()
FROM next WHERE j.id = next.id
RETURNING j.id, j.fence`
	fleetHeartbeatSQL = `
UPDATE jobfence_jobs j SET lease_expires_at = now() + $3::interval
FROM unnest($1::bigint[], $2::bigint[]) AS l(id, fence)
WHERE j.id = l.id AND j.fence = l.fence AND j.state = 'running' AND j.lease_expires_at > now()`
	fleetCompleteSQL = `
UPDATE jobfence_jobs j SET state = 'completed', finalized_at = now(), lease_expires_at = NULL
FROM unnest($1::bigint[], $2::bigint[]) AS l(id, fence)
WHERE j.id = l.id AND j.fence = l.fence AND j.state = 'running' AND j.lease_expires_at > now()`
)

// fleet enqueues, claims, heartbeats and completes jobs without pause,
// recording how long each statement took, the leases it lost and the
// jobs it completed.
type fleet struct {
	t         *testing.T
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	completed atomic.Int64

	mu      sync.Mutex
	slowest map[string]time.Duration
	lost    int64
	errs    []error
}

// startFleet starts an enqueuer and two workers on db's schema.
func startFleet(t *testing.T, db *pgtest.DB) *fleet {
	t.Helper()
	pool := pgtest.AppPool(t, db, "fleet", 6)
	ctx, cancel := context.WithCancel(context.Background())
	f := &fleet{t: t, cancel: cancel, slowest: map[string]time.Duration{}}
	lease := leaseFor.String()
	f.wg.Add(3)
	go func() {
		defer f.wg.Done()
		for ctx.Err() == nil {
			f.exec(ctx, "enqueue", func(ctx context.Context) (int64, error) {
				_, err := pool.Exec(ctx, fleetEnqueueSQL)
				return 0, err
			})
		}
	}()
	for range 2 {
		go func() {
			defer f.wg.Done()
			for ctx.Err() == nil {
				var ids, fences []int64
				f.exec(ctx, "claim", func(ctx context.Context) (int64, error) {
					rows, err := pool.Query(ctx, fleetClaimSQL, lease)
					if err != nil {
						return 0, err
					}
					var id, fence int64
					_, err = pgx.ForEachRow(rows, []any{&id, &fence}, func() error {
						ids, fences = append(ids, id), append(fences, fence)
						return nil
					})
					return 0, err
				})
				if len(ids) == 0 {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				// Each job runs for three heartbeats.
				for range 3 {
					time.Sleep(beatEvery)
					f.exec(ctx, "heartbeat", func(ctx context.Context) (int64, error) {
						tag, err := pool.Exec(ctx, fleetHeartbeatSQL, ids, fences, lease)
						return int64(len(ids)) - tag.RowsAffected(), err
					})
				}
				f.exec(ctx, "complete", func(ctx context.Context) (int64, error) {
					tag, err := pool.Exec(ctx, fleetCompleteSQL, ids, fences)
					f.completed.Add(tag.RowsAffected())
					return int64(len(ids)) - tag.RowsAffected(), err
				})
			}
		}()
	}
	return f
}

// exec runs one statement of the fleet, bounded so that a test of the old
// migrations ends, and records its time (retries included) and the leases
// it lost. A statement chosen as a deadlock's victim is run again, as a
// worker's next claim, beat or outcome would be: a migration's ALTER
// waiting in a lock queue can close a cycle between two of the fleet's own
// statements (one waiting for the other's row, which waits behind the
// ALTER), and PostgreSQL may break it by ending either side.
func (f *fleet) exec(ctx context.Context, op string, run func(context.Context) (lost int64, err error)) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	lost, err := run(ctx)
	for pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "40P01"; {
		lost, err = run(ctx)
	}
	took := time.Since(start)
	f.mu.Lock()
	defer f.mu.Unlock()
	if errors.Is(err, context.Canceled) {
		return // the fleet stopping
	}
	if err != nil {
		f.errs = append(f.errs, fmt.Errorf("%s: %w", op, err))
	}
	f.slowest[op] = max(f.slowest[op], took)
	f.lost += lost
}

// stop stops the fleet and checks that no statement waited longer than
// maxWait, none failed and no lease was lost.
func (f *fleet) stop() {
	f.t.Helper()
	f.cancel()
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.t.Logf("fleet: slowest statements %v, %d jobs completed", f.slowest, f.completed.Load())
	for _, op := range []string{"enqueue", "claim", "heartbeat", "complete"} {
		if f.slowest[op] == 0 {
			f.t.Errorf("fleet: no %s ran", op)
		}
		if f.slowest[op] > maxWait {
			f.t.Errorf("fleet: a %s waited %v, more than %v", op, f.slowest[op].Round(time.Millisecond), maxWait)
		}
	}
	if f.lost > 0 {
		f.t.Errorf("fleet: %d leases lost", f.lost)
	}
	for _, err := range f.errs[:min(len(f.errs), 5)] {
		f.t.Errorf("fleet: %v", err)
	}
}

// holdTable opens a transaction that reads and writes the jobs table and
// stays idle, as a service's transactional enqueue in a slow request
// does; end ends it.
func holdTable(t *testing.T, db *pgtest.DB) (end func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.AppURL(t, db, "holder"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT id FROM jobfence_jobs LIMIT 1`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO jobfence_jobs (queue, kind) VALUES ('held', 'k')`); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := tx.Rollback(ctx); err != nil {
			t.Error(err)
		}
	}
}

// migrateOnALiveFleet runs migrate while a fleet works on db's schema and
// a transaction holds the jobs table for holdFor, and checks that the
// fleet never waited longer than maxWait, lost no lease and completed
// jobs while the table was held, and that migrate succeeded.
func migrateOnALiveFleet(t *testing.T, db *pgtest.DB, migrate func(context.Context) error) {
	t.Helper()
	f := startFleet(t, db)
	time.Sleep(200 * time.Millisecond) // the fleet at work
	end := holdTable(t, db)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- migrate(ctx) }()
	before := f.completed.Load()
	time.Sleep(holdFor)
	during := f.completed.Load() - before
	end()
	err := <-done
	time.Sleep(100 * time.Millisecond) // the fleet on the migrated schema
	f.stop()
	if err != nil {
		t.Fatalf("migrating: %v", err)
	}
	if during == 0 {
		t.Errorf("fleet: no job completed in the %v the table was held", holdFor)
	}
}

// TestUpOnALiveFleet: from each earlier version, Up migrates to the latest
// while a fleet works and a transaction holds the jobs table for a few
// seconds: no enqueue, claim, heartbeat or completion waits longer than
// 2 s, no lease is lost, and Up finishes once the transaction ends. (From
// version 0 there is no table for a fleet: Up just migrates.)
func TestUpOnALiveFleet(t *testing.T) {
	latest := latestVersion(t)
	for from := int64(0); from < latest; from++ {
		t.Run(fmt.Sprintf("from %d", from), func(t *testing.T) {
			// Each in a schema of its own, beside the others: a concurrent
			// index build waits for the transactions that hold its table
			// and for those that hold a snapshot, in any schema; the
			// others' fleets hold snapshots for milliseconds, their
			// holders none.
			t.Parallel()
			db := pgtest.New(t, pgtest.Options{NoMigrate: true})
			m := liveMigrator(t)
			if from == 0 {
				if err := m.Up(context.Background(), db.URL); err != nil {
					t.Fatal(err)
				}
			} else {
				providerAt(t, db.URL, from)
				migrateOnALiveFleet(t, db, func(ctx context.Context) error { return m.Up(ctx, db.URL) })
			}
			if v, err := migrations.Version(context.Background(), db.URL); err != nil || v != latest {
				t.Fatalf("version after Up = %d, %v; want %d", v, err, latest)
			}
		})
	}
}

// TestDownOnALiveFleet: Down, one version at a time from the latest to 1,
// runs while a fleet works and a transaction holds the jobs table for a
// few seconds, with the same bounds; going down from 9, the traceparents
// of 25,000 traced jobs move back into their metadata in batches, each its
// own transaction.
func TestDownOnALiveFleet(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t, pgtest.Options{NoMigrate: true})
	latest := latestVersion(t)
	providerAt(t, db.URL, latest)
	const traced = 25_000
	if _, err := db.Pool.Exec(ctx, `INSERT INTO jobfence_jobs (queue, kind, state, scheduled_at, trace_context)
		SELECT 'traced', 'k', 'scheduled', now() + interval '1 day', decode('000af7651916cd43dd8448eb211c80319cb7ad6b716920333101', 'hex')
		FROM generate_series(1, $1)`, traced); err != nil {
		t.Fatal(err)
	}
	m := liveMigrator(t)
	migrateOnALiveFleet(t, db, func(ctx context.Context) error {
		// Versions may skip a number (one reserved for a change not yet
		// merged): go down until version 1, one migration at a time.
		for {
			v, err := migrations.Version(ctx, db.URL)
			if err != nil {
				return err
			}
			if v <= 1 {
				break
			}
			if err := m.Down(ctx, db.URL); err != nil {
				return err
			}
			if v, err = migrations.Version(ctx, db.URL); err != nil || v != 8 {
				if err != nil {
					return err
				}
				continue
			}
			var moved, transactions int
			if err := db.Pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT xmin::text) FROM jobfence_jobs
				WHERE queue = 'traced' AND metadata->>'traceparent' = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'`).Scan(&moved, &transactions); err != nil {
				return err
			}
			if want := (traced + 9_999) / 10_000; moved != traced || transactions < want {
				return fmt.Errorf("going down from 9 moved %d traceparents in %d transactions, want %d in at least %d", moved, transactions, traced, want)
			}
		}
		return nil
	})
	if v, err := migrations.Version(ctx, db.URL); err != nil || v != 1 {
		t.Fatalf("version after going down = %d, %v; want 1", v, err)
	}
}

// TestConcurrentUpTakeTurns: two Up calls at once, as two pods deploying
// together, both succeed, one after the other: each migration is applied
// once. A transaction holding the jobs table for a moment makes both
// reach the same migration before either applies it.
func TestConcurrentUpTakeTurns(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t, pgtest.Options{NoMigrate: true})
	providerAt(t, db.URL, 8)
	end := holdTable(t, db)
	m := liveMigrator(t)
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- m.Up(ctx, db.URL) }()
	}
	time.Sleep(1500 * time.Millisecond)
	end()
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("one of two concurrent Up calls: %v", err)
		}
	}
	var applied, versions int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT version_id) FROM `+migrations.VersionTable+` WHERE version_id > 0`).Scan(&applied, &versions); err != nil {
		t.Fatal(err)
	}
	if files := migrationFiles(t); applied != versions || versions != files {
		t.Fatalf("version table: %d rows for %d versions, want one row for each of %d migrations", applied, versions, files)
	}
}

// TestUpGivesUpOnAFrozenLockHolder: a session that holds the migration
// lock and does nothing more, as a migrator whose process was frozen,
// makes Up give up after its LockWait with an error that names the
// holder and how to end it; once the holder is gone, Up runs.
func TestUpGivesUpOnAFrozenLockHolder(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t, pgtest.Options{NoMigrate: true})
	holder, err := pgx.Connect(ctx, pgtest.AppURL(t, db, "frozen-migrator"))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrations.LockID(db.Schema)); err != nil {
		t.Fatal(err)
	}
	pid := holder.PgConn().PID()
	const wait = 1500 * time.Millisecond
	start := time.Now()
	err = migrations.Migrator{LockWait: wait}.Up(ctx, db.URL)
	took := time.Since(start)
	var locked *migrations.LockedError
	if !errors.Is(err, migrations.ErrLocked) || !errors.As(err, &locked) {
		t.Fatalf("Up while a frozen session holds the lock = %v, want a *LockedError", err)
	}
	if took < wait || took > wait+5*time.Second {
		t.Errorf("Up gave up after %v, want %v", took, wait)
	}
	for _, want := range []string{
		fmt.Sprintf("another migration of schema %q holds jobfence's migration lock", db.Schema),
		fmt.Sprintf("held by server process %d (application 'frozen-migrator'", pid),
		fmt.Sprintf("SELECT pg_terminate_backend(%d)", pid),
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q\nwant it to contain %q", err, want)
		}
	}
	if v, err := migrations.Version(ctx, db.URL); err != nil || v != 0 {
		t.Fatalf("version after giving up = %d, %v; want 0", v, err)
	}
	holder.Close(ctx)
	if err := (migrations.Migrator{LockWait: wait}).Up(ctx, db.URL); err != nil {
		t.Fatalf("Up once the holder is gone: %v", err)
	}
}

// TestUpGivesUpOnALongTransaction: while a transaction holds the jobs
// table for longer than the migrator tries, Up gives up after Attempts
// tries of the migration, each bounded by its lock_timeout, naming the
// migration and how to find the transaction, and the version stays.
func TestUpGivesUpOnALongTransaction(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t, pgtest.Options{NoMigrate: true})
	providerAt(t, db.URL, 8)
	end := holdTable(t, db)
	defer end()
	start := time.Now()
	err := migrations.Migrator{Attempts: 2, Backoff: 10 * time.Millisecond, Log: slog.New(slog.NewTextHandler(testWriter{t}, nil))}.Up(ctx, db.URL)
	took := time.Since(start)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("Up while a transaction holds the table = %v, want a lock_not_available error", err)
	}
	for _, want := range []string{"migrations: up: 00009_trace_context.sql: gave up after 2 tries", "FROM pg_stat_activity"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q\nwant it to contain %q", err, want)
		}
	}
	if took > 2*time.Second+3*time.Second {
		t.Errorf("Up gave up after %v, want about 2 s (two tries of 1 s)", took)
	}
	if v, err := migrations.Version(ctx, db.URL); err != nil || v != 8 {
		t.Fatalf("version after giving up = %d, %v; want 8", v, err)
	}
}
