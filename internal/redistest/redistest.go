// Package redistest gives tests a real redis-server: the one REDIS_URL names,
// or a throwaway server started for the test binary by Main.
package redistest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobfence/jobfence/internal/devenv"
)

// Main runs the tests of a package, starting a throwaway redis-server first
// when REDIS_URL is unset. Use it from TestMain.
func Main(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Getenv("REDIS_URL") == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		r, err := devenv.StartRedis(ctx)
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "redistest:", err)
			return 1
		}
		defer r.Stop()
		os.Setenv("REDIS_URL", r.URL)
	}
	return m.Run()
}

// Client returns a client on a key prefix of its own for t (Redis has only 16
// numbered databases, so tests isolate by prefix). It is closed when the test
// ends.
func Client(t testing.TB) (*redis.Client, string) {
	t.Helper()
	u := os.Getenv("REDIS_URL")
	if u == "" {
		t.Fatal("redistest: REDIS_URL is unset; call redistest.Main from TestMain")
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatalf("redistest: parse %s: %v", u, err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c, fmt.Sprintf("t%d:", time.Now().UnixNano())
}

// Start starts a redis-server of the test's own, for tests that stop it
// mid-way; it is stopped when the test ends.
func Start(t testing.TB) *devenv.Redis {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := devenv.StartRedis(ctx)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(func() { r.Stop() })
	return r
}
