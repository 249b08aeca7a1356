package devenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// PgBouncerOptions says how StartPgBouncer configures PgBouncer.
type PgBouncerOptions struct {
	// Upstream is the PostgreSQL server's host:port (loopback). Required.
	Upstream string
	// Database is the upstream database every client connects to, under
	// the same name. Default: postgres.
	Database string
	// Users may log in (trust, as the throwaway server itself trusts
	// loopback). The admin console accepts AdminUser. Default: postgres.
	Users []string
	// AdminUser may run SHOW POOLS and the like on the "pgbouncer"
	// database. Default: postgres.
	AdminUser string
	// PoolSize is how many server connections each (database, user) pool
	// may open: PgBouncer's default_pool_size. Default: 20.
	PoolSize int
	// MaxClients is max_client_conn. Default: 2000.
	MaxClients int
}

// PgBouncer is a throwaway PgBouncer in transaction pooling mode, started
// by StartPgBouncer.
type PgBouncer struct {
	// Dir holds the configuration, the auth file, the pid file and the log.
	Dir string
	// Port is the loopback TCP port PgBouncer listens on.
	Port int
	// Options are the options it was started with, defaults filled in.
	Options PgBouncerOptions

	asUser string
}

// ErrBadPgBouncerOptions is returned by StartPgBouncer for options it
// cannot start from.
var ErrBadPgBouncerOptions = errors.New("devenv: bad PgBouncer options")

func pgbouncerBinary() (string, bool) {
	for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"} {
		if _, err := os.Stat(p); err == nil {
			return p, true
		}
	}
	p, err := exec.LookPath("pgbouncer")
	return p, err == nil
}

// InstallPgBouncer makes sure the pgbouncer binary is present, installing
// Debian's pgbouncer package when the process runs as root.
func InstallPgBouncer(ctx context.Context) error {
	if _, ok := pgbouncerBinary(); ok {
		return nil
	}
	return aptInstall(ctx, []string{"pgbouncer"})
}

// StartPgBouncer starts PgBouncer on a free loopback port in transaction
// pooling mode in front of o.Upstream, in a new temporary directory, and
// returns once it accepts connections. Stop stops it.
func StartPgBouncer(ctx context.Context, o PgBouncerOptions) (*PgBouncer, error) {
	if o.Upstream == "" {
		return nil, fmt.Errorf("%w: no upstream server", ErrBadPgBouncerOptions)
	}
	upHost, upPort, err := net.SplitHostPort(o.Upstream)
	if err != nil {
		return nil, fmt.Errorf("%w: upstream %q: %w", ErrBadPgBouncerOptions, o.Upstream, err)
	}
	if o.Database == "" {
		o.Database = "postgres"
	}
	if o.AdminUser == "" {
		o.AdminUser = "postgres"
	}
	if len(o.Users) == 0 {
		o.Users = []string{"postgres"}
	}
	if o.PoolSize <= 0 {
		o.PoolSize = 20
	}
	if o.MaxClients <= 0 {
		o.MaxClients = 2000
	}
	for _, name := range append([]string{o.Database, o.AdminUser}, o.Users...) {
		// Names go into an ini file and a quoted auth file unescaped.
		if name == "" || strings.ContainsAny(name, "\"'=; \t\r\n[]") {
			return nil, fmt.Errorf("%w: name %q: use letters, digits and underscores", ErrBadPgBouncerOptions, name)
		}
	}
	if err := InstallPgBouncer(ctx); err != nil {
		return nil, err
	}
	bin, ok := pgbouncerBinary()
	if !ok {
		return nil, fmt.Errorf("%w: pgbouncer not found", ErrNotInstalled)
	}
	// PgBouncer refuses to run as root: as root, it runs as postgres.
	dir, asUser, err := serverDir("jobfence-pgbouncer-")
	if err != nil {
		return nil, err
	}
	b := &PgBouncer{Dir: dir, Options: o, asUser: asUser}
	users := append([]string{o.AdminUser}, o.Users...)
	var auth strings.Builder
	for _, u := range users {
		fmt.Fprintf(&auth, "%q \"\"\n", u)
	}
	if err := os.WriteFile(filepath.Join(dir, "users.txt"), []byte(auth.String()), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("devenv: auth file: %w", err)
	}
	port, err := onFreePort(func(port int) error {
		ini := b.config(port, upHost, upPort)
		if err := os.WriteFile(filepath.Join(dir, "pgbouncer.ini"), []byte(ini), 0o644); err != nil {
			return fmt.Errorf("devenv: pgbouncer.ini: %w", err)
		}
		// -d: PgBouncer daemonizes once its socket is bound, or exits non-zero.
		out, err := b.run(ctx, bin, "-d", filepath.Join(dir, "pgbouncer.ini"))
		if err != nil {
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			return fmt.Errorf("devenv: pgbouncer: %w: %s %s", err, out, log)
		}
		if err := waitDaemon(ctx, loopback(port), filepath.Join(dir, "pgbouncer.pid"), 10*time.Second); err != nil {
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			b.kill()
			return fmt.Errorf("devenv: pgbouncer not ready: %w: %s", err, log)
		}
		return nil
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	b.Port = port
	return b, nil
}

func (b *PgBouncer) config(port int, upHost, upPort string) string {
	o := b.Options
	return fmt.Sprintf(`[databases]
%s = host=%s port=%s dbname=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
admin_users = %s
stats_users = %s
pool_mode = transaction
default_pool_size = %d
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = %d
max_db_connections = %d
server_reset_query =
ignore_startup_parameters = extra_float_digits
logfile = %s
pidfile = %s
log_connections = 0
log_disconnections = 0
`, o.Database, upHost, upPort, o.Database, port,
		filepath.Join(b.Dir, "users.txt"), o.AdminUser, o.AdminUser,
		o.PoolSize, o.MaxClients, o.PoolSize,
		filepath.Join(b.Dir, "pgbouncer.log"), filepath.Join(b.Dir, "pgbouncer.pid"))
}

func (b *PgBouncer) run(ctx context.Context, bin string, args ...string) ([]byte, error) {
	return runIn(ctx, b.Dir, b.asUser, bin, args...)
}

// ExecMode is the pgx query exec mode of URL: unnamed statements with
// cached descriptions. PgBouncer 1.18 in transaction mode does not carry a
// named prepared statement (pgx's default) from one server connection to
// the next, and pgx's "exec" mode sends a []byte for a jsonb column as
// bytea. See docs/pgbouncer.md.
const ExecMode = "cache_describe"

// URL connects through PgBouncer to its database as user, in ExecMode.
func (b *PgBouncer) URL(user string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable&default_query_exec_mode=%s",
		user, b.Port, b.Options.Database, ExecMode)
}

// Stop stops PgBouncer and removes its directory. Calling it twice is safe.
func (b *PgBouncer) Stop() error {
	b.kill()
	os.RemoveAll(b.Dir)
	return nil
}

// kill stops PgBouncer: SIGTERM, then SIGKILL if it has not exited
// within 5s.
func (b *PgBouncer) kill() {
	stopPidFile(filepath.Join(b.Dir, "pgbouncer.pid"), syscall.SIGTERM, syscall.SIGKILL)
}

// CreateRoleSchema creates, on the server adminURL connects to, a login
// role and a schema both called name, the schema owned by the role and
// first on the role's default search_path. That is how a client reaches a
// schema of its own through PgBouncer in transaction mode: a search_path
// in the URL is a startup parameter, which PgBouncer does not pass on. It
// returns adminURL with the role as its user, and drop, which removes the
// role and everything it owns.
func CreateRoleSchema(ctx context.Context, adminURL, name string) (roleURL string, drop func(), err error) {
	u, err := url.Parse(adminURL)
	if err != nil {
		return "", nil, fmt.Errorf("devenv: parse the admin URL: %w", err)
	}
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", nil, fmt.Errorf("devenv: connect: %w", err)
	}
	defer admin.Close(context.Background())
	id := pgx.Identifier{name}.Sanitize()
	for _, q := range []string{
		"CREATE ROLE " + id + " LOGIN",
		"CREATE SCHEMA " + id + " AUTHORIZATION " + id,
		"ALTER ROLE " + id + " SET search_path = " + id,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			return "", nil, fmt.Errorf("devenv: %s: %w", q, err)
		}
	}
	drop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := pgx.Connect(ctx, adminURL)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		// DROP OWNED takes the schema and its tables with it.
		_, _ = c.Exec(ctx, "DROP OWNED BY "+id+" CASCADE")
		_, _ = c.Exec(ctx, "DROP ROLE IF EXISTS "+id)
	}
	u.User = url.User(name)
	return u.String(), drop, nil
}
