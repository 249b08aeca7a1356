package pgqueue

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/testwatch"
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

// TestWakesWaitNotHeldByLaterJobs: a service that keeps inserting keeps
// a queue's sender going, one wake-up after another; wait returns once
// the wake-ups that the jobs committed before it need are sent (the one
// in flight, and the one its mark calls for), not when the inserts stop.
func TestWakesWaitNotHeldByLaterJobs(t *testing.T) {
	var sends atomic.Int64
	w := newWakes(slog.New(slog.DiscardHandler), func(ctx context.Context, q string) error {
		sends.Add(1)
		time.Sleep(time.Millisecond)
		return nil
	})
	defer w.close()
	stop := make(chan struct{})
	marking := make(chan struct{})
	go func() {
		defer close(marking)
		for {
			select {
			case <-stop:
				return
			default:
				w.committed(context.Background(), "q")
				runtime.Gosched()
			}
		}
	}()
	defer func() { close(stop); <-marking }()
	testwatch.WaitFor(t, time.Minute, "a few wake-ups sent", func() bool { return sends.Load() >= 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := w.wait(ctx); err != nil {
		t.Fatalf("wait while jobs keep coming: %v, want it to return once the wake-ups of the jobs before it are sent", err)
	}
}
