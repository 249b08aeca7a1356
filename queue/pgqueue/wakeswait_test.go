package pgqueue

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"
)

// TestWakesWaitForTheirSenders: wait returns once the wake-ups being
// sent in the background are sent, and not before: a stopping worker
// (WaitReleases) must not leave one to a pool its caller closes next.
// While a send is held, wait ends only with its ctx.
func TestWakesWaitForTheirSenders(t *testing.T) {
	hold := make(chan struct{})
	sent := make(chan string, 1)
	w := newWakes(slog.New(slog.DiscardHandler), func(ctx context.Context, q string) error {
		select {
		case <-hold:
			sent <- q
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	defer w.close()
	if err := w.wait(context.Background()); err != nil {
		t.Fatalf("wait with no wake-up in flight: %v", err)
	}
	w.committed(context.Background(), "q")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := w.wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait while a wake-up is held: %v, want the context's deadline", err)
	}
	close(hold)
	if err := w.wait(context.Background()); err != nil {
		t.Fatalf("wait once the wake-up may go: %v", err)
	}
	select {
	case q := <-sent:
		if q != "q" {
			t.Fatalf("sent a wake-up of %q, want q", q)
		}
	default:
		t.Fatal("wait returned before the wake-up was sent")
	}
}
