package jobfencetest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/jobfencetest/devserver"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// unavailableEnv carries, from Main to NewDB in the same process, why no
// server could be had when MainOptions.SkipWithoutServer is set.
const unavailableEnv = "JOBFENCETEST_NO_SERVER"

// MainOptions tunes Main.
type MainOptions struct {
	// SkipWithoutServer makes the tests that call NewDB skip, naming the
	// reason, when DATABASE_URL is unset and no throwaway server can be
	// started. By default (false) the test binary fails at once instead,
	// so that a CI run cannot pass by testing nothing.
	SkipWithoutServer bool
}

// Main runs a package's tests with a PostgreSQL server: the one
// DATABASE_URL names or, when it is unset, a throwaway server that Main
// starts from the system's binaries, points DATABASE_URL at, and removes
// when the tests end. Call it from TestMain:
//
//	func TestMain(m *testing.M) { jobfencetest.Main(m) }
func Main(m *testing.M, opts ...MainOptions) {
	os.Exit(run(m, opts...))
}

func run(m *testing.M, opts ...MainOptions) int {
	var o MainOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	if os.Getenv("DATABASE_URL") == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		env, err := devserver.Start(ctx, devserver.Options{Postgres: true})
		cancel()
		if err != nil {
			msg := fmt.Sprintf("jobfencetest: no PostgreSQL server: DATABASE_URL is unset and a throwaway server could not be started: %v", err)
			if !o.SkipWithoutServer {
				fmt.Fprintln(os.Stderr, msg)
				return 1
			}
			os.Setenv(unavailableEnv, msg)
			return m.Run()
		}
		defer env.Close()
		os.Setenv("DATABASE_URL", env.DatabaseURL)
	}
	return m.Run()
}

// DB is a migrated schema of its own for one test.
type DB struct {
	// Schema is the schema's name, a fresh one per test.
	Schema string
	// URL connects with Schema first on the search_path: use it for
	// anything that opens its own connections.
	URL string
	// Pool is a pool on URL, closed by Close (when the test ends).
	Pool *pgxpool.Pool

	schema *devserver.Schema
}

// Options tunes NewDB.
type Options struct {
	// NoMigrate leaves the schema empty instead of creating jobfence's
	// tables in it, for tests of migrations.
	NoMigrate bool
	// MaxConns caps Pool; zero means 20.
	MaxConns int32
}

// NewDB creates a schema for t on the server Main provided, as OpenDB
// does, and drops it when the test ends. Without Main (and DATABASE_URL
// unset) it fails the test saying so.
func NewDB(t testing.TB, opts ...Options) *DB {
	t.Helper()
	base := os.Getenv("DATABASE_URL")
	if base == "" {
		if msg := os.Getenv(unavailableEnv); msg != "" {
			t.Skip(msg)
		}
		t.Fatal("jobfencetest: DATABASE_URL is unset; call jobfencetest.Main(m) from TestMain, or set DATABASE_URL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := OpenDB(ctx, base, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Log(err)
		}
	})
	return db
}

// OpenDB creates a fresh schema on the server baseURL names, creates
// jobfence's tables in it (unless Options.NoMigrate: by replaying, in one
// transaction, a schema the migrations made once per server, where a
// pg_dump of the server's version is installed, else by running the
// migrations) and opens a pool
// whose search_path is that schema. Close drops the schema. NewDB is
// OpenDB for a test; OpenDB serves where there is no testing.TB, such as
// an Example function.
func OpenDB(ctx context.Context, baseURL string, opts ...Options) (*DB, error) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	schema, err := devserver.CreateSchema(ctx, baseURL, "t_")
	if err != nil {
		return nil, fmt.Errorf("jobfencetest: %w", err)
	}
	db := &DB{Schema: schema.Name, URL: schema.URL, schema: schema}
	fail := func(err error) (*DB, error) {
		db.Close()
		return nil, err
	}
	if !o.NoMigrate {
		if err := migrate(ctx, baseURL, schema); err != nil {
			return fail(fmt.Errorf("jobfencetest: migrate: %w", err))
		}
	}
	maxConns := int32(20)
	if o.MaxConns > 0 {
		maxConns = o.MaxConns
	}
	if db.Pool, err = openPool(ctx, db.URL, maxConns); err != nil {
		return fail(err)
	}
	return db, nil
}

// openPool opens a pool on the connection string u, capped at maxConns
// when it is positive.
func openPool(ctx context.Context, u string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		return nil, fmt.Errorf("jobfencetest: parse %s: %w", pgqueue.RedactConnString(u), pgqueue.RedactError(err, u))
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("jobfencetest: pool: %w", err)
	}
	return pool, nil
}

// Close closes Pool and drops the schema with everything in it.
func (db *DB) Close() error {
	if db.Pool != nil {
		db.Pool.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := db.schema.Drop(ctx); err != nil {
		return fmt.Errorf("jobfencetest: %w", err)
	}
	return nil
}

// NewPool opens another pool on the test's schema, as a second instance
// of a service would; it is closed when the test ends. maxConns caps it;
// zero keeps pgxpool's default.
func (db *DB) NewPool(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	return db.newPool(t, db.URL, maxConns)
}

// NewPoolVia opens a pool on the test's schema whose connections go to
// addr (host:port) instead of the server, for example through a proxy
// that injects network faults; it is closed when the test ends. It
// connects lazily.
func (db *DB) NewPoolVia(t testing.TB, addr string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatalf("jobfencetest: parse %s: %v", pgqueue.RedactConnString(db.URL), err)
	}
	u.Host = addr
	return db.newPool(t, u.String(), maxConns)
}

func (db *DB) newPool(t testing.TB, u string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	pool, err := openPool(context.Background(), u, maxConns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
