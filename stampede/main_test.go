package stampede

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobfence/jobfence/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// logBuffer collects a Guard's log lines for assertions.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// newGuard returns a Guard on client under prefix, with a discarding logger
// unless o names one.
func newGuard[V any](t testing.TB, client redis.UniversalClient, prefix string, o Options) *Guard[V] {
	t.Helper()
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	o.Prefix = prefix + o.Prefix
	if o.Logger == nil {
		o.Logger = discardLogger()
	}
	g, err := New[V](client, o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return g
}

// until polls cond every 10ms until it holds or the test's patience (one
// minute) runs out.
func until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting until %s", what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
