package idempotency_test

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(pausedOwnerEnv) != "" {
		// Re-executed by TestPauseTwoProcesses as the owner that gets paused.
		os.Exit(pausedOwnerMain())
	}
	if os.Getenv(frozenTxHolderEnv) != "" {
		// Re-executed by TestDoTxFrozenHolderReleasesKey as the holder that freezes.
		os.Exit(frozenTxHolderMain())
	}
	pgtest.Main(m)
}

// testCtx returns a context that ends with the test or after a generous
// bound, so a broken test fails instead of hanging.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// logRecorder is a slog.Handler that counts messages, so tests can wait for
// a caller to reach a state ("waiting for key in progress") instead of
// sleeping.
type logRecorder struct {
	mu     sync.Mutex
	counts map[string]int
}

func newLogRecorder() *logRecorder { return &logRecorder{counts: map[string]int{}} }

func (r *logRecorder) Logger() *slog.Logger { return slog.New(r) }

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.counts[rec.Message]++
	r.mu.Unlock()
	return nil
}

func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

func (r *logRecorder) count(msg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[msg]
}

// waitFor polls until msg was logged at least n times.
func (r *logRecorder) waitFor(t *testing.T, msg string, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for r.count(msg) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%q logged %d times after a minute, want %d", msg, r.count(msg), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

const (
	msgWaiting  = "idempotency: waiting for key in progress"
	msgTookOver = "idempotency: took over a key whose holder's lease ran out, or that had expired"
)

type atomicCounter struct{ n atomic.Int64 }

func (c *atomicCounter) next() int64 { return c.n.Add(1) }
