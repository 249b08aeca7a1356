package devenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"time"
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

// loopback is host:port for port on 127.0.0.1.
func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// waitTCP waits until addr accepts a TCP connection, for timeout at most.
func waitTCP(ctx context.Context, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitDaemon waits, for timeout at most, until a daemonized server
// accepts TCP connections on addr and has written its pid file. A server
// can accept before it writes the file (PgBouncer and redis-server bind
// first), and Stop, which finds the server by that file, would then leave
// it running.
func waitDaemon(ctx context.Context, addr, pidFile string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	if err := waitTCP(ctx, addr, timeout); err != nil {
		return err
	}
	for {
		_, err := readPid(pidFile)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no pid file: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// readPid reads the pid a daemon wrote to pidFile.
func readPid(pidFile string) (int, error) {
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(raw)))
}

// stopPidFile sends the process named in pidFile (a daemonized server)
// each of sigs in turn, waiting up to 5s after each for it to exit, and
// returns once it has, or after the last signal's wait. It does nothing
// without a readable pid file.
func stopPidFile(pidFile string, sigs ...syscall.Signal) {
	pid, err := readPid(pidFile)
	if err != nil {
		return
	}
	alive := func() bool { return syscall.Kill(pid, 0) == nil && !isZombie(pid) }
	for _, sig := range sigs {
		_ = syscall.Kill(pid, sig)
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) && alive() {
			time.Sleep(20 * time.Millisecond)
		}
		if !alive() {
			return
		}
	}
}

func isZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the parenthesised command name.
	for i := len(b) - 1; i > 0; i-- {
		if b[i] == ')' && i+2 < len(b) {
			return b[i+2] == 'Z'
		}
	}
	return false
}
