package pgtest

import (
	"context"
	"crypto/rand"
	"errors"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/internal/devenv"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/migrations"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// Bounced is a test's schema reached through a PgBouncer of its own in
// transaction pooling mode.
//
// The schema belongs to a role of the test's own whose default search_path
// is the schema (ALTER ROLE ... SET search_path): a search_path in the
// connection's startup parameters would be session state, which PgBouncer
// does not carry from one server connection to the next.
type Bounced struct {
	// DB reaches the schema directly as the server's superuser; its Pool
	// is closed when the test ends.
	*DB
	// Bouncer is the PgBouncer, stopped when the test ends.
	Bouncer *devenv.PgBouncer
	// Role owns the schema and logs in through Bouncer.
	Role string
	// BouncedURL connects through Bouncer as Role, in devenv.ExecMode.
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

// NewBounced creates a migrated schema owned by a new role (see
// devenv.CreateRoleSchema) and starts a
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
	if _, ok := t.(*testing.T); ok {
		testwatch.Bound(t, HangLimit)
	}
	base := os.Getenv("DATABASE_URL")
	if base == "" {
		t.Fatal("pgtest: DATABASE_URL is unset; call pgtest.Main from TestMain")
	}
	role := "t_" + strings.ToLower(rand.Text()[:12])
	direct, drop, err := devenv.CreateRoleSchema(ctx, base, role)
	if err != nil {
		t.Fatalf("pgtest: %v", pgqueue.RedactError(err, base))
	}
	t.Cleanup(drop)
	// Migrated as the role, so it owns the tables too.
	if err := migrations.Up(ctx, direct); err != nil {
		t.Fatalf("pgtest: migrate as %s: %v", role, err)
	}
	db := &DB{Schema: role, URL: WithSearchPath(base, role)}
	db.Pool = db.NewPool(t, 20)
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatalf("pgtest: parse: %v", err)
	}
	b, err := devenv.StartPgBouncer(ctx, devenv.PgBouncerOptions{Upstream: u.Host, Database: strings.TrimPrefix(u.Path, "/"), Users: []string{role}, PoolSize: o.PoolSize})
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { b.Stop() })
	return &Bounced{DB: db, Bouncer: b, Role: role, BouncedURL: b.URL(role), DirectURL: direct}
}

// BouncedPool opens a pool of maxConns connections through PgBouncer, as
// one service instance would; it is closed when the test ends.
func (b *Bounced) BouncedPool(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	// A DB on BouncedURL opens its pools there.
	return (&DB{URL: b.BouncedURL}).NewPool(t, maxConns)
}

// ServerConns counts the server connections of the test's role, as
// pg_stat_activity sees them.
func (b *Bounced) ServerConns(ctx context.Context) (int, error) {
	var n int
	err := b.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE usename = $1`, b.Role).Scan(&n)
	return n, err
}
