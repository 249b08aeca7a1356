package stampede

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/logbuf"

	"github.com/jobfence/jobfence/internal/redistest"
)

// TestHungComputeIsBounded: a compute that hangs, ignoring its ctx, is given
// up after ComputeTimeout: its ctx ends, Get returns ErrComputeTimeout, the
// lock is released rather than extended forever, a waiter in another
// instance then takes the lock and computes, and the key's flight is free
// for the next Get. Before the fix, the holder's Get and its flight never
// ended and its watchdog extended the lock for as long as compute hung, so
// the waiter waited its whole WaitTimeout.
func TestHungComputeIsBounded(t *testing.T) {
	c1, prefix := redistest.Client(t)
	c2, _ := redistest.Client(t)
	const computeTimeout = time.Second
	var logs logbuf.Buffer
	holder := newGuard[string](t, c1, prefix, Options{LockTTL: 600 * time.Millisecond, ComputeTimeout: computeTimeout, Logger: textLogger(&logs)})
	waiter := newGuard[string](t, c2, prefix, Options{WaitTimeout: time.Minute, PollInterval: 20 * time.Millisecond})
	lock := prefix + "stampede:lock:k"

	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	in := make(chan struct{})
	ctxEnded := make(chan struct{})
	type result struct {
		v   string
		err error
	}
	holderOut := make(chan result, 1)
	ctx, cancel := context.WithTimeout(t.Context(), computeTimeout+4*time.Second)
	defer cancel()
	begun := time.Now()
	go func() {
		v, err := holder.Get(ctx, "k", time.Minute, func(ctx context.Context) (string, error) {
			go func() {
				<-ctx.Done()
				close(ctxEnded)
			}()
			close(in)
			<-hang // ignores ctx
			return "hung", nil
		})
		holderOut <- result{v, err}
	}()
	<-in
	waiterOut := make(chan result, 1)
	go func() {
		v, err := waiter.Get(ctx, "k", time.Minute, func(context.Context) (string, error) { return "from waiter", nil })
		waiterOut <- result{v, err}
	}()

	r := <-holderOut
	took := time.Since(begun)
	if !errors.Is(r.err, ErrComputeTimeout) || took > computeTimeout+3*time.Second {
		t.Fatalf("holder Get = %q, %v after %v; want ErrComputeTimeout within %v", r.v, r.err, took, computeTimeout+3*time.Second)
	}
	select {
	case <-ctxEnded:
	case <-time.After(time.Second):
		t.Fatal("compute's ctx did not end at the bound")
	}
	if s := holder.Stats(); s.ComputeTimeouts != 1 {
		t.Fatalf("holder stats %+v; want 1 compute timeout", s)
	}
	if !strings.Contains(logs.String(), "compute timed out") {
		t.Fatalf("timeout not logged:\n%s", logs.String())
	}

	w := <-waiterOut
	if w.err != nil || w.v != "from waiter" {
		t.Fatalf("waiter Get = %q, %v; want its own value once the hung holder gave up", w.v, w.err)
	}
	if s := waiter.Stats(); s.Computations != 1 || s.FailOpens != 0 {
		t.Fatalf("waiter stats %+v; want 1 computation under the lock", s)
	}
	if n := c1.Exists(t.Context(), lock).Val(); n != 0 {
		t.Fatalf("lock still held after both computed")
	}
	// The flight is free: the next Get in the holder's process returns.
	v, err := holder.Get(ctx, "k", time.Minute, func(context.Context) (string, error) { return "", errors.New("not expected") })
	if err != nil || v != "from waiter" {
		t.Fatalf("holder's next Get = %q, %v; want the stored value", v, err)
	}
}
