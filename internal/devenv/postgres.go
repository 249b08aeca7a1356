package devenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Postgres is a throwaway PostgreSQL server started by StartPostgres.
type Postgres struct {
	// Dir holds the data directory, the socket and the server log.
	Dir string
	// Port is the loopback TCP port the server listens on.
	Port int
	// URL connects to the postgres database as the postgres superuser.
	URL string

	// StatStatements reports that pg_stat_statements is preloaded (it was
	// asked for and the installed PostgreSQL has it): CREATE EXTENSION
	// pg_stat_statements then works in any database.
	StatStatements bool

	bin    string
	asUser string
	opts   PostgresOptions
}

// PostgresOptions tunes StartPostgresWith. The zero value is the server
// StartPostgres starts: durability off, shared_buffers 256MB.
type PostgresOptions struct {
	// Durable keeps fsync, synchronous_commit and full_page_writes at
	// PostgreSQL's defaults (on), so that a commit costs what it costs in
	// production: a benchmark's figures mean something only then. Tests
	// leave it off; they never survive a crash of the machine anyway.
	Durable bool
	// SharedBuffers is the server's shared_buffers, such as "2GB";
	// empty means 256MB.
	SharedBuffers string
	// StatStatements preloads pg_stat_statements when the installed
	// PostgreSQL has it (Postgres.StatStatements tells).
	StatStatements bool
}

// StartPostgres initialises a data directory in a new temporary directory and
// starts a server on a free loopback port with durability turned off (fsync,
// synchronous_commit and full_page_writes), which suits tests,
// never production. StartPostgresWith starts a durable one.
func StartPostgres(ctx context.Context) (*Postgres, error) {
	return StartPostgresWith(ctx, PostgresOptions{})
}

// StartPostgresWith is StartPostgres with options.
func StartPostgresWith(ctx context.Context, o PostgresOptions) (*Postgres, error) {
	if err := installMissing(ctx, servers{postgres: true}); err != nil {
		return nil, err
	}
	bin, ok := postgresBinDir()
	if !ok {
		return nil, fmt.Errorf("%w: initdb not found", ErrNotInstalled)
	}
	// initdb refuses to run as root: as root, the server runs as postgres.
	dir, asUser, err := serverDir("jobfence-pg-")
	if err != nil {
		return nil, err
	}
	if o.SharedBuffers == "" {
		o.SharedBuffers = "256MB"
	}
	if err := CheckMemorySetting(o.SharedBuffers); err != nil {
		return nil, fmt.Errorf("devenv: shared_buffers: %w", err)
	}
	if o.StatStatements {
		// Debian's postgresql-15 package ships the contrib modules; a
		// build without them simply runs without the view.
		_, err := os.Stat(filepath.Join(filepath.Dir(bin), "lib", "pg_stat_statements.so"))
		o.StatStatements = err == nil
	}
	p := &Postgres{Dir: dir, bin: bin, asUser: asUser, opts: o, StatStatements: o.StatStatements}
	if err := os.Chmod(dir, 0o700); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("devenv: chmod %s: %w", dir, err)
	}
	data := filepath.Join(dir, "data")
	if out, err := p.run(ctx, "initdb", "-D", data, "-U", "postgres", "--auth=trust",
		"-E", "UTF8", "--locale=C.UTF-8", "--no-sync"); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("devenv: initdb: %w: %s", err, out)
	}
	port, err := onFreePort(func(port int) error {
		out, err := p.run(ctx, "pg_ctl", "-D", data, "-l", p.LogFile(),
			"-w", "-t", "60", "-o", p.serverOpts(port), "start")
		if err != nil {
			log, _ := os.ReadFile(p.LogFile())
			return fmt.Errorf("devenv: pg_ctl start: %w: %s %s", err, out, log)
		}
		return nil
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p.Port = port
	p.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	return p, nil
}

// LogFile is the server's log (its stderr), in Dir.
func (p *Postgres) LogFile() string { return filepath.Join(p.Dir, "server.log") }

func (p *Postgres) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	return runIn(ctx, p.Dir, p.asUser, filepath.Join(p.bin, name), args...)
}

// Stop stops the server at once and removes its directory.
func (p *Postgres) Stop() error {
	err := p.stop("immediate")
	os.RemoveAll(p.Dir)
	return err
}

// Halt shuts the server down cleanly but keeps its data, so Resume can
// start it again on the same port: a database that is down for a while.
// (A clean shutdown matters: with synchronous_commit off, an immediate one
// can lose the last commits.)
func (p *Postgres) Halt() error {
	return p.stop("fast")
}

func (p *Postgres) stop(mode string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	data := filepath.Join(p.Dir, "data")
	out, err := p.run(ctx, "pg_ctl", "-D", data, "-m", mode, "-w", "stop")
	// The postmaster can linger as a zombie here; wait for its pid file instead.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, serr := os.Stat(filepath.Join(data, "postmaster.pid")); os.IsNotExist(serr) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("devenv: pg_ctl stop: %w: %s", err, out)
	}
	return nil
}

// Resume starts a halted server again on its port.
func (p *Postgres) Resume(ctx context.Context) error {
	data := filepath.Join(p.Dir, "data")
	out, err := p.run(ctx, "pg_ctl", "-D", data, "-l", p.LogFile(),
		"-w", "-t", "60", "-o", p.serverOpts(p.Port), "start")
	if err != nil {
		return fmt.Errorf("devenv: pg_ctl start: %w: %s", err, out)
	}
	return nil
}

func (p *Postgres) serverOpts(port int) string {
	s := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c max_connections=300 -c shared_buffers=%s",
		port, p.Dir, p.opts.SharedBuffers)
	if !p.opts.Durable {
		s += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
	}
	if p.opts.StatStatements {
		s += " -c shared_preload_libraries=pg_stat_statements"
	}
	return s
}

// CheckMemorySetting accepts a PostgreSQL memory setting as the server
// command line takes it: digits and a unit (kB, MB, GB or TB), or digits
// alone (8kB pages).
func CheckMemorySetting(v string) error {
	unit := strings.TrimLeft(v, "0123456789")
	if len(unit) == len(v) {
		return fmt.Errorf("%q: want a size such as 256MB or 2GB", v)
	}
	switch unit {
	case "", "kB", "MB", "GB", "TB":
		return nil
	}
	return fmt.Errorf("%q: unit %q: want kB, MB, GB or TB", v, unit)
}
