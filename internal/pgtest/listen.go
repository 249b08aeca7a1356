package pgtest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Listener is a session of its own that LISTENs on a channel, as another
// process's worker does: what reaches it was sent through the server.
type Listener struct {
	conn *pgxpool.Conn
}

// Listen starts a Listener on channel, a session of pool held until the
// test ends.
func Listen(t testing.TB, pool *pgxpool.Pool, channel string) *Listener {
	t.Helper()
	conn, err := pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	if _, err := conn.Exec(context.Background(), "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return &Listener{conn: conn}
}

// Next waits, within d, for a notification whose payload is one of
// payloads, skipping the others, and returns its payload.
func (l *Listener) Next(t testing.TB, d time.Duration, payloads ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		n, err := l.conn.Conn().WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("waiting for a notification of %q: %v", payloads, err)
		}
		if slices.Contains(payloads, n.Payload) {
			return n.Payload
		}
	}
}
