package stampede

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/logbuf"

	"github.com/redis/go-redis/v9"

	"github.com/jobfence/jobfence/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// textLogger logs as text into l.
func textLogger(l *logbuf.Buffer) *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

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
