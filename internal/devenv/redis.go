package devenv

import (
	"context"
	"fmt"
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
	if err := installMissing(ctx, servers{redis: true}); err != nil {
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
	port, err := onFreePort(func(port int) error {
		cmd := exec.CommandContext(ctx, bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "yes",
			"--pidfile", filepath.Join(dir, "redis.pid"), "--logfile", filepath.Join(dir, "redis.log"))
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("devenv: redis-server: %w: %s", err, out)
		}
		if err := waitDaemon(ctx, loopback(port), filepath.Join(dir, "redis.pid"), 10*time.Second); err != nil {
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			return fmt.Errorf("devenv: redis-server not ready: %w: %s", err, log)
		}
		return nil
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	addr := loopback(port)
	return &Redis{Dir: dir, Addr: addr, URL: "redis://" + addr + "/0"}, nil
}

// Stop kills the server and removes its directory. Calling it twice is safe.
func (r *Redis) Stop() error {
	stopPidFile(filepath.Join(r.Dir, "redis.pid"), syscall.SIGKILL)
	os.RemoveAll(r.Dir)
	return nil
}
