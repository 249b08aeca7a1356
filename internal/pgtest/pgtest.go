// Package pgtest gives each test its own PostgreSQL schema on a real server:
// the one DATABASE_URL names, or a throwaway server that Main starts for the
// test binary.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/internal/devenv"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/migrations"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// Main runs the tests of a package. When DATABASE_URL is unset it starts a
// throwaway server first, points DATABASE_URL at it and stops it afterwards.
// Use it from TestMain: func TestMain(m *testing.M) { pgtest.Main(m) }.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Getenv("DATABASE_URL") == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		pg, err := devenv.StartPostgres(ctx)
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
			return 1
		}
		defer pg.Stop()
		os.Setenv("DATABASE_URL", pg.URL)
	}
	return m.Run()
}

// DB is a schema of its own for one test.
type DB struct {
	// Schema is the schema's name; it is first on the search_path of URL.
	Schema string
	// URL connects with the schema as the search_path.
	URL string
	// Pool is a pool on URL, closed when the test ends.
	Pool *pgxpool.Pool
}

// Options tunes New.
type Options struct {
	// NoMigrate leaves the schema empty instead of applying jobfence's migrations.
	NoMigrate bool
	// MaxConns caps the pool; zero means 20.
	MaxConns int32
}

// HangLimit bounds each test that calls New. The slowest test takes about a
// minute on two busy cores.
const HangLimit = 10 * time.Minute

// New creates a schema for t, migrates it and returns a pool whose
// search_path is that schema. The schema is dropped when the test ends.
//
// A test (not a benchmark) that takes a schema is bounded by HangLimit, its
// cleanups included: see testwatch.Bound.
func New(t testing.TB, opts ...Options) *DB {
	t.Helper()
	if _, ok := t.(*testing.T); ok {
		testwatch.Bound(t, HangLimit)
	}
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	base := os.Getenv("DATABASE_URL")
	if base == "" {
		t.Fatal("pgtest: DATABASE_URL is unset; call pgtest.Main from TestMain")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	schema := "t_" + randomHex(6)
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("pgtest: connect %s: %v", pgqueue.RedactConnString(base), pgqueue.RedactError(err, base))
	}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		admin.Close(ctx)
		t.Fatalf("pgtest: create schema: %v", err)
	}
	admin.Close(ctx)
	u := WithSearchPath(base, schema)
	if !o.NoMigrate {
		if err := migrations.Up(ctx, u); err != nil {
			t.Fatalf("pgtest: migrate: %v", err)
		}
	}
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		t.Fatalf("pgtest: parse %s: %v", pgqueue.RedactConnString(u), pgqueue.RedactError(err, u))
	}
	cfg.MaxConns = 20
	if o.MaxConns > 0 {
		cfg.MaxConns = o.MaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	return &DB{Schema: schema, URL: u, Pool: pool}
}

// NewPool opens another pool on the test's schema, as a second service
// instance would; it is closed when the test ends.
func (db *DB) NewPool(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	return db.newPool(t, db.URL, maxConns)
}

// NewPoolVia opens a pool on the test's schema whose connections go to
// addr (host:port) instead of the server, for example through a
// netfault.Proxy; it is closed when the test ends. It connects lazily.
func (db *DB) NewPoolVia(t testing.TB, addr string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatalf("pgtest: parse: %v", err)
	}
	u.Host = addr
	return db.newPool(t, u.String(), maxConns)
}

func (db *DB) newPool(t testing.TB, u string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		t.Fatalf("pgtest: parse: %v", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// WithSearchPath returns the connection URL with search_path set to schema.
func WithSearchPath(base, schema string) string {
	u, err := url.Parse(base)
	if err != nil {
		return base
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
