package devenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Redis is a throwaway redis-server started by StartRedis.
type Redis struct {
	// Dir holds the pid file and the log.
	Dir string
	// Addr is host:port on loopback.
	Addr string
	// URL is Addr as a redis:// URL.
	URL string
}

// StartRedis starts redis-server without persistence on a free loopback port
// in a new temporary directory.
func StartRedis(ctx context.Context) (*Redis, error) {
	if err := Install(ctx); err != nil {
		return nil, err
	}
	bin, ok := redisBinary()
	if !ok {
		return nil, fmt.Errorf("%w: redis-server not found", ErrNotInstalled)
	}
	dir, err := os.MkdirTemp("", "jobfence-redis-")
	if err != nil {
		return nil, fmt.Errorf("devenv: temp dir: %w", err)
	}
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			lastErr = err
			continue
		}
		cmd := exec.CommandContext(ctx, bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "yes",
			"--pidfile", filepath.Join(dir, "redis.pid"), "--logfile", filepath.Join(dir, "redis.log"))
		if out, err := cmd.CombinedOutput(); err != nil {
			lastErr = fmt.Errorf("devenv: redis-server: %w: %s", err, out)
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if err := waitTCP(ctx, addr, 10*time.Second); err != nil {
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			lastErr = fmt.Errorf("devenv: redis-server not ready: %w: %s", err, log)
			continue
		}
		return &Redis{Dir: dir, Addr: addr, URL: "redis://" + addr + "/0"}, nil
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

// Stop kills the server and removes its directory. Calling it twice is safe.
func (r *Redis) Stop() error {
	pidFile := filepath.Join(r.Dir, "redis.pid")
	b, err := os.ReadFile(pidFile)
	if err == nil {
		if pid, perr := strconv.Atoi(string(trimSpace(b))); perr == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			deadline := time.Now().Add(5 * time.Second)
			for time.Now().Before(deadline) && syscall.Kill(pid, 0) == nil && !isZombie(pid) {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	os.RemoveAll(r.Dir)
	return nil
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

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

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
