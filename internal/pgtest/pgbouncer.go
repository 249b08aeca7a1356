package pgtest

import (
	"context"
	"errors"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/internal/devenv"
	"github.com/jobfence/jobfence/migrations"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// ExecMode is the pgx query exec mode jobfence's connections through
// PgBouncer 1.18 in transaction mode use: unnamed statements, since a
// named one is prepared on one server connection and may be executed on
// another.
const ExecMode = "cache_describe"

// Bounced is a test's schema reached through a PgBouncer of its own in
// transaction pooling mode.
//
// The schema belongs to a role of the test's own whose default search_path
// is the schema (ALTER ROLE ... SET search_path): a search_path in the
// connection's startup parameters would be session state, which PgBouncer
// does not carry from one server connection to the next.
type Bounced struct {
	*DB
	// Bouncer is the PgBouncer, stopped when the test ends.
	Bouncer *devenv.PgBouncer
	// Role owns the schema and logs in through Bouncer.
	Role string
	// BouncedURL connects through Bouncer as Role, in ExecMode.
	BouncedURL string
	// DirectURL connects to the server as Role, bypassing Bouncer (for
	// LISTEN).
	DirectURL string
}

// BouncedOptions tunes NewBounced.
type BouncedOptions struct {
	// PoolSize is PgBouncer's server connections for the test's role.
	// Default: 20.
	PoolSize int
}

// NewBounced creates a migrated schema owned by a new role and starts a
// PgBouncer in transaction mode in front of the test server for that
// role. It skips the test, saying why, when PgBouncer cannot be installed
// (not root). The role, schema and PgBouncer go when the test ends.
func NewBounced(t testing.TB, o BouncedOptions) *Bounced {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := devenv.InstallPgBouncer(ctx); errors.Is(err, devenv.ErrNotInstalled) {
		t.Skipf("pgtest: PgBouncer is needed for this test: %v (run make test as root, or apt-get install pgbouncer)", err)
	} else if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	db := New(t, Options{NoMigrate: true})
	base := os.Getenv("DATABASE_URL")
	role := db.Schema
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", pgqueue.RedactError(err, base))
	}
	defer admin.Close(context.Background())
	id := pgx.Identifier{role}.Sanitize()
	for _, q := range []string{
		"CREATE ROLE " + id + " LOGIN",
		"ALTER SCHEMA " + pgx.Identifier{db.Schema}.Sanitize() + " OWNER TO " + id,
		"ALTER ROLE " + id + " SET search_path = " + pgx.Identifier{db.Schema}.Sanitize(),
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("pgtest: %s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		// DROP OWNED takes the schema with it; DROP ROLE may wait for
		// the role's last backend to go.
		_, _ = c.Exec(ctx, "DROP OWNED BY "+id+" CASCADE")
		_, _ = c.Exec(ctx, "DROP ROLE IF EXISTS "+id)
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("pgtest: parse: %v", err)
	}
	u.User = url.User(role)
	direct := u.String()
	// The role's default search_path applies: migrate as the role, so it
	// owns the tables too.
	if err := migrations.Up(ctx, direct); err != nil {
		t.Fatalf("pgtest: migrate as %s: %v", role, err)
	}
	b, err := devenv.StartPgBouncer(ctx, devenv.PgBouncerOptions{Upstream: u.Host, Database: u.Path[1:], Users: []string{role}, PoolSize: o.PoolSize})
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { b.Stop() })
	bu, err := url.Parse(b.URL(role))
	if err != nil {
		t.Fatalf("pgtest: parse: %v", err)
	}
	q := bu.Query()
	q.Set("default_query_exec_mode", ExecMode)
	bu.RawQuery = q.Encode()
	return &Bounced{DB: db, Bouncer: b, Role: role, BouncedURL: bu.String(), DirectURL: direct}
}

// BouncedPool opens a pool of maxConns connections through PgBouncer, as
// one service instance would; it is closed when the test ends.
func (b *Bounced) BouncedPool(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	return b.newPool(t, b.BouncedURL, maxConns)
}

// ServerConns counts the server connections of the test's role, as
// pg_stat_activity sees them.
func (b *Bounced) ServerConns(ctx context.Context) (int, error) {
	var n int
	err := b.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE usename = $1`, b.Role).Scan(&n)
	return n, err
}
