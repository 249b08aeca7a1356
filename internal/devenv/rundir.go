package devenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
)

// serverDir makes a temporary directory for a server that refuses to run
// as root (PostgreSQL, PgBouncer): as root, the directory belongs to the
// postgres user and asUser names it; otherwise asUser is empty and the
// server runs as this process's user.
func serverDir(prefix string) (dir, asUser string, err error) {
	dir, err = os.MkdirTemp("", prefix)
	if err != nil {
		return "", "", fmt.Errorf("devenv: temp dir: %w", err)
	}
	if os.Geteuid() != 0 {
		return dir, "", nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		os.RemoveAll(dir)
		return "", "", fmt.Errorf("devenv: running as root needs a postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		os.RemoveAll(dir)
		return "", "", fmt.Errorf("devenv: chown %s: %w", dir, err)
	}
	return dir, "postgres", nil
}

// runIn runs path with args in dir, as asUser when it is set (through
// runuser), and returns its combined output.
func runIn(ctx context.Context, dir, asUser, path string, args ...string) ([]byte, error) {
	var cmd *exec.Cmd
	if asUser != "" {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", asUser, "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	cmd.Dir = dir
	return cmd.CombinedOutput()
}
