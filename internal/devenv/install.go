package devenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
)

// ErrNotInstalled is returned when a server's binaries are missing and cannot
// be installed from here (not root, or apt-get is missing).
var ErrNotInstalled = errors.New("devenv: server binaries not installed")

// postgresBinDirs lists where Debian puts PostgreSQL's server binaries, newest
// major version first.
func postgresBinDir() (string, bool) {
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Sort(sort.Reverse(sort.StringSlice(matches)))
	for _, m := range matches {
		return filepath.Dir(m), true
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), true
	}
	return "", false
}

func redisBinary() (string, bool) {
	p, err := exec.LookPath("redis-server")
	return p, err == nil
}

// Install makes sure the PostgreSQL and Redis server binaries are present,
// installing the Debian packages postgresql and redis-server when the
// process runs as root. It does nothing when both are already installed.
func Install(ctx context.Context) error {
	return installMissing(ctx, servers{postgres: true, redis: true})
}

// InstallAll is Install, InstallPgBouncer and InstallChromium in one
// apt-get run: what jobfence setup does before the tests.
func InstallAll(ctx context.Context) error {
	return installMissing(ctx, servers{postgres: true, redis: true, pgbouncer: true, chromium: true})
}

// servers names the servers whose binaries a caller needs.
type servers struct {
	postgres, redis, pgbouncer, chromium bool
}

// missing returns the Debian packages of the servers in s whose binaries
// are not installed.
func (s servers) missing() []string {
	var pkgs []string
	if _, ok := postgresBinDir(); s.postgres && !ok {
		pkgs = append(pkgs, "postgresql")
	}
	if _, ok := redisBinary(); s.redis && !ok {
		pkgs = append(pkgs, "redis-server")
	}
	if _, ok := pgbouncerBinary(); s.pgbouncer && !ok {
		pkgs = append(pkgs, "pgbouncer")
	}
	if _, ok := ChromiumBinary(); s.chromium && !ok {
		pkgs = append(pkgs, "chromium")
	}
	return pkgs
}

// installMissing installs, in one apt-get run, the packages of the servers
// in s whose binaries are missing. A caller that starts one server asks
// for that one's package only: the bench, which needs PostgreSQL alone,
// runs on a machine without Redis and without apt-get's package lists.
func installMissing(ctx context.Context, s servers) error {
	pkgs := s.missing()
	if len(pkgs) == 0 {
		return nil
	}
	return aptInstall(ctx, pkgs)
}

// aptLockWait makes apt-get wait for the package database's lock rather
// than fail at once: two test runs on one machine (or an unattended
// upgrade) may install at the same time.
const aptLockWait = "-oDPkg::Lock::Timeout=300"

// aptInstall installs Debian packages as root, or says which to install.
func aptInstall(ctx context.Context, pkgs []string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: install the Debian packages %v (or set DATABASE_URL and REDIS_URL)", ErrNotInstalled, pkgs)
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return fmt.Errorf("%w: no apt-get to install %v", ErrNotInstalled, pkgs)
	}
	if err := aptUpdate(ctx); err != nil {
		return err
	}
	args := append([]string{"install", "-y", "-qq", "--no-install-recommends", aptLockWait}, pkgs...)
	install := exec.CommandContext(ctx, "apt-get", args...)
	install.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if out, err := install.CombinedOutput(); err != nil {
		return fmt.Errorf("devenv: apt-get install %v: %w: %s", pkgs, err, out)
	}
	return nil
}

// aptUpdate refreshes apt's package lists, which a fresh machine lacks.
func aptUpdate(ctx context.Context) error {
	update := exec.CommandContext(ctx, "apt-get", "update", "-qq", aptLockWait)
	if out, err := update.CombinedOutput(); err != nil {
		return fmt.Errorf("devenv: apt-get update: %w: %s", err, out)
	}
	return nil
}
