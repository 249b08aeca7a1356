package idempotency_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobfence/jobfence/idempotency"
	"github.com/jobfence/jobfence/internal/netfault"
	"github.com/jobfence/jobfence/internal/pgtest"
)

// TestDoPartitionedHolderIsCancelled: the holder A of a key is cut off from
// the database (its network black-holed, nothing closed) while fn runs,
// over a slow link that delivered the claim's reply late. A cannot extend
// its lease, so fn's ctx must be cancelled when the lease runs out, counted
// from when the claim was sent: no later than the lease the database
// recorded, so before B can take the key over. Before the fix, the
// extension hung until TCP gave up (many minutes) and fn ran on while B
// took the key over and ran fn too; counting the lease from the reply would
// cancel fn a link delay after B could have taken over.
func TestDoPartitionedHolderIsCancelled(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.New(t)
	proxy := netfault.New(t, netfault.TargetOf(t, db.URL), netfault.Forward)
	const lease = 2 * time.Second
	const latency = 700 * time.Millisecond
	aPool := db.NewPoolVia(t, proxy.Addr(), 2)
	if err := aPool.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	a := idempotency.New(aPool, idempotency.Options{Scope: "cut", Lease: lease, Heartbeat: 500 * time.Millisecond})
	b := idempotency.New(db.Pool, idempotency.Options{Scope: "cut", WaitForInProgress: true, PollInterval: 20 * time.Millisecond})

	proxy.SetLatency(latency)
	running := make(chan struct{})
	var cancelledAt atomic.Int64 // Unix nanoseconds
	type outcome struct{ cause, err error }
	aDone := make(chan outcome, 1)
	start := time.Now()
	go func() {
		var o outcome
		_, o.err = a.Do(ctx, "order-1", "fp", func(ctx context.Context) ([]byte, error) {
			close(running)
			select {
			case <-ctx.Done():
				cancelledAt.Store(time.Now().UnixNano())
				o.cause = context.Cause(ctx)
				return nil, ctx.Err()
			case <-time.After(time.Minute):
				return []byte("A"), nil
			}
		})
		aDone <- o
	}()
	<-running
	proxy.SetMode(netfault.Stall)
	rec, err := b.Lookup(ctx, "order-1")
	if err != nil || rec.State != idempotency.StateInProgress {
		t.Fatalf("A's key: %+v, %v", rec, err)
	}

	var o outcome
	select {
	case o = <-aDone:
	case <-time.After(lease + 3*time.Second):
		t.Fatalf("A's fn still runs %v after A claimed the key with a %v lease and lost the database", time.Since(start), lease)
	}
	if !errors.Is(o.cause, idempotency.ErrStaleFence) || !errors.Is(o.err, idempotency.ErrStaleFence) {
		t.Fatalf("A: ctx cause %v, Do error %v; want ErrStaleFence for both", o.cause, o.err)
	}
	// A's clock and the database's are this host's. The slack is for
	// scheduling on a loaded machine, and below the link's delay
	// (latency), which a lease counted from the claim's reply would add.
	cancelled := time.Unix(0, cancelledAt.Load())
	if late := cancelled.Sub(rec.LeaseExpiresAt); late > 500*time.Millisecond {
		t.Fatalf("A's fn cancelled %v after the lease the database recorded ended", late)
	}

	var tookOverAt time.Time
	got, err := b.Do(ctx, "order-1", "fp", func(context.Context) ([]byte, error) {
		tookOverAt = time.Now()
		return []byte("B"), nil
	})
	if err != nil || string(got) != "B" {
		t.Fatalf("B: %q, %v", got, err)
	}
	if !cancelled.Before(tookOverAt) {
		t.Fatalf("B took the key over at %v, before A's fn was cancelled at %v", tookOverAt, cancelled)
	}
}
