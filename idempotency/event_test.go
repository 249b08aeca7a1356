package idempotency_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jobfence/jobfence/idempotency"
	"github.com/jobfence/jobfence/internal/pgtest"
)

// events records what OnEvent is told.
type events struct {
	mu    sync.Mutex
	kinds []idempotency.EventKind
}

func (e *events) on(_ context.Context, ev idempotency.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.kinds = append(e.kinds, ev.Kind)
}

func (e *events) got() []idempotency.EventKind {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.kinds)
}

// TestOnEvent: a run, a replay, a key reuse, an in-progress conflict and a
// takeover are each reported once, as they happen.
func TestOnEvent(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.New(t)
	var rec events
	s := idempotency.New(db.Pool, idempotency.Options{Scope: "ev", OnEvent: rec.on, Lease: 500 * time.Millisecond, Heartbeat: -1})
	ok := func(context.Context) ([]byte, error) { return []byte("r"), nil }

	if _, err := s.Do(ctx, "a", "fp", ok); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Do(ctx, "a", "fp", ok); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Do(ctx, "a", "other", ok); !errors.Is(err, idempotency.ErrKeyReused) {
		t.Fatalf("reuse: %v", err)
	}
	want := []idempotency.EventKind{idempotency.EventRun, idempotency.EventReplay, idempotency.EventKeyReused}
	if got := rec.got(); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}

	// A holder that outlives its lease (no heartbeats): a caller meanwhile
	// is refused, and one after the lease takes the key over.
	held := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := s.Do(ctx, "b", "fp", func(ctx context.Context) ([]byte, error) {
			close(held)
			<-ctx.Done() // cancelled when the lease runs out
			return nil, ctx.Err()
		})
		done <- err
	}()
	<-held
	if _, err := s.Do(ctx, "b", "fp", ok); !errors.Is(err, idempotency.ErrInProgress) {
		t.Fatalf("while held: %v", err)
	}
	if err := <-done; !errors.Is(err, idempotency.ErrStaleFence) {
		t.Fatalf("holder past its lease: %v", err)
	}
	var after events
	waiter := idempotency.New(db.Pool, idempotency.Options{Scope: "ev", OnEvent: after.on, WaitForInProgress: true, PollInterval: 20 * time.Millisecond})
	if _, err := waiter.Do(ctx, "b", "fp", ok); err != nil {
		t.Fatal(err)
	}
	want = append(want, idempotency.EventRun, idempotency.EventInProgress)
	if got := rec.got(); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	// The waiter may have found the lease still running by the database's
	// clock (and waited) before it took the key over.
	got := after.got()
	if len(got) == 0 || got[len(got)-1] != idempotency.EventTakeover || len(got) > 2 {
		t.Fatalf("waiter's events %v, want a takeover, perhaps after an in-progress wait", got)
	}
}
