package idempotency_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobfence/jobfence/idempotency"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
)

func TestErrStaleFenceIsQueues(t *testing.T) {
	if idempotency.ErrStaleFence != queue.ErrStaleFence {
		t.Fatal("idempotency.ErrStaleFence is not queue.ErrStaleFence")
	}
}

func TestDoRunsOnceAndReplays(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.New(t)
	s := idempotency.New(db.Pool, idempotency.Options{Scope: "orders"})
	var runs atomic.Int32
	fn := func(ctx context.Context) ([]byte, error) {
		if _, ok := idempotency.FenceFrom(ctx); !ok {
			t.Error("fn's ctx carries no fence")
		}
		runs.Add(1)
		return []byte(`{"order":1}`), nil
	}
	for i := range 3 {
		got, err := s.Do(ctx, "order-1", "fp", fn)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if string(got) != `{"order":1}` {
			t.Fatalf("call %d: response %q", i, got)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("fn ran %d times, want 1", n)
	}
	r, err := s.Lookup(ctx, "order-1")
	if err != nil {
		t.Fatal(err)
	}
	if r.State != idempotency.StateCompleted || string(r.Response) != `{"order":1}` || r.Fence <= 0 ||
		r.CompletedAt.IsZero() || !r.LeaseExpiresAt.IsZero() || r.Scope != "orders" {
		t.Fatalf("record %+v", r)
	}
	if _, err := s.Lookup(ctx, "order-2"); !errors.Is(err, idempotency.ErrKeyNotFound) {
		t.Fatalf("Lookup of an unknown key: %v, want ErrKeyNotFound", err)
	}
}

func TestDoBadInput(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.New(t)
	s := idempotency.New(db.Pool, idempotency.Options{})
	ok := func(context.Context) ([]byte, error) {
		t.Error("fn ran on bad input")
		return nil, nil
	}
	tests := []struct {
		name        string
		store       *idempotency.Store
		key, fp     string
		fn          func(context.Context) ([]byte, error)
		want        string
		isInvalidKy bool
	}{
		{"empty key", s, "", "fp", ok, "jobfence: invalid key: key is empty", true},
		{"long key", s, strings.Repeat("k", 1025), "fp", ok,
			"jobfence: invalid key: key is 1025 bytes long, more than MaxKeyLen (1024)", true},
		{"NUL in key", s, "a\x00b", "fp", ok, "jobfence: invalid key: key is not valid UTF-8 text without NUL bytes", true},
		{"bad UTF-8 key", s, "\xff", "fp", ok, "jobfence: invalid key: key is not valid UTF-8 text without NUL bytes", true},
		{"NUL in fingerprint", s, "k", "\x00", ok,
			"jobfence: invalid key: fingerprint is not valid UTF-8 text without NUL bytes", true},
		{"long scope", s.WithScope(strings.Repeat("s", 2000)), "k", "fp", ok,
			"jobfence: invalid key: scope is 2000 bytes long, more than MaxKeyLen (1024)", true},
		{"nil fn", s, "k", "fp", nil, "jobfence: idempotency: Do: fn is nil", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.store.Do(ctx, tt.key, tt.fp, tt.fn)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
			if errors.Is(err, idempotency.ErrInvalidKey) != tt.isInvalidKy {
				t.Fatalf("errors.Is(err, ErrInvalidKey) = %v", !tt.isInvalidKy)
			}
		})
	}
	var n int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM jobfence_idempotency_keys").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d keys stored after bad input (%v), want 0", n, err)
	}
}

func TestDoKeyReused(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.New(t)
	s := idempotency.New(db.Pool, idempotency.Options{Scope: "charge"})
	if _, err := s.Do(ctx, "k1", "amount=100", func(context.Context) ([]byte, error) { return []byte("ok"), nil }); err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	held := make(chan struct{})
	go func() {
		_, _ = s.Do(ctx, "k2", "amount=100", func(context.Context) ([]byte, error) {
			close(held)
			<-hold
			return []byte("ok"), nil
		})
	}()
	<-held
	defer close(hold)
	for _, key := range []string{"k1", "k2"} { // completed, in progress
		_, err := s.Do(ctx, key, "amount=999", func(context.Context) ([]byte, error) {
			t.Error("fn ran for a reused key")
			return nil, nil
		})
		want := `jobfence: idempotency key "` + key + `" (scope "charge") reused with a different request fingerprint; the operation was not run`
		if err == nil || err.Error() != want {
			t.Fatalf("%s: error %v, want %q", key, err, want)
		}
		var kr *idempotency.KeyReusedError
		if !errors.Is(err, idempotency.ErrKeyReused) || !errors.As(err, &kr) || kr.Key != key {
			t.Fatalf("%s: error %v is not a *KeyReusedError for the key", key, err)
		}
	}
}

func TestDoInProgress(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.New(t)
	s := idempotency.New(db.Pool, idempotency.Options{Scope: "charge"})
	hold := make(chan struct{})
	held := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := s.Do(ctx, "k", "fp", func(context.Context) ([]byte, error) {
			close(held)
			<-hold
			return []byte("first"), nil
		})
		done <- err
	}()
	<-held
	_, err := s.Do(ctx, "k", "fp", func(context.Context) ([]byte, error) {
		t.Error("fn ran while the key was in progress")
		return nil, nil
	})
	var ip *idempotency.InProgressError
	if !errors.Is(err, idempotency.ErrInProgress) || !errors.As(err, &ip) {
		t.Fatalf("error %v, want an *InProgressError", err)
	}
	if ip.Key != "k" || ip.Scope != "charge" || ip.LeaseExpiresAt.IsZero() ||
		!strings.HasPrefix(err.Error(), `jobfence: idempotency key "k" (scope "charge") is in progress under another caller (lease until `) {
		t.Fatalf("error %q (%+v)", err, ip)
	}
	close(hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	_, err = s.Do(ctx, "k", "fp", nil)
	if err == nil || err.Error() != "jobfence: idempotency: Do: fn is nil" {
		t.Fatalf("nil fn: %v", err)
	}
	got, err := s.Do(ctx, "k", "fp", func(context.Context) ([]byte, error) { return nil, errors.New("ran again") })
	if err != nil || string(got) != "first" {
		t.Fatalf("after completion: %q, %v", got, err)
	}
}

// TestDoFailureFreesKey shows that a failed or panicking fn leaves no key
// behind: its error comes back unchanged and the next call runs fn.
func TestDoFailureFreesKey(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.New(t)
	s := idempotency.New(db.Pool, idempotency.Options{})
	errDeclined := errors.New("card declined")
	tests := []struct {
		name string
		fail func() ([]byte, error)
	}{
		{"error", func() ([]byte, error) { return nil, errDeclined }},
		{"panic", func() ([]byte, error) { panic("boom") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := "key-" + tt.name
			func() {
				defer func() {
					if r := recover(); r != nil && r != "boom" {
						t.Fatalf("recovered %v", r)
					}
				}()
				_, err := s.Do(ctx, key, "fp", func(context.Context) ([]byte, error) { return tt.fail() })
				if err != errDeclined {
					t.Fatalf("error %v, want fn's error unchanged", err)
				}
			}()
			if _, err := s.Lookup(ctx, key); !errors.Is(err, idempotency.ErrKeyNotFound) {
				t.Fatalf("key after failure: %v, want ErrKeyNotFound", err)
			}
			got, err := s.Do(ctx, key, "fp", func(context.Context) ([]byte, error) { return []byte("second"), nil })
			if err != nil || string(got) != "second" {
				t.Fatalf("retry: %q, %v", got, err)
			}
		})
	}
}

func TestScopesAreIndependent(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.New(t)
	base := idempotency.New(db.Pool, idempotency.Options{})
	if base.Scope() != idempotency.DefaultScope {
		t.Fatalf("default scope %q", base.Scope())
	}
	var runs atomic.Int32
	for _, scope := range []string{"tenant-1", "tenant-2", "tenant-1"} {
		s := base.WithScope(scope)
		got, err := s.Do(ctx, "invoice-7", "fp", func(context.Context) ([]byte, error) {
			runs.Add(1)
			return []byte(scope), nil
		})
		if err != nil || string(got) != scope {
			t.Fatalf("%s: %q, %v", scope, got, err)
		}
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("fn ran %d times over scopes tenant-1, tenant-2, tenant-1; want 2", n)
	}
}

// TestDoFiftyCallersOneKey: 50 goroutines call Do with one key at once; fn
// runs once. fn holds the key until every other caller has found it in
// progress, so all 50 really contend.
func TestDoFiftyCallersOneKey(t *testing.T) {
	const callers = 50
	tests := []struct {
		name string
		wait bool
	}{
		{"wait for the response", true},
		{"in-progress error", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			db := pgtest.New(t, pgtest.Options{MaxConns: 30})
			rec := newLogRecorder()
			s := idempotency.New(db.Pool, idempotency.Options{
				WaitForInProgress: tt.wait, PollInterval: 10 * time.Millisecond, Logger: rec.Logger(),
			})
			var runs atomic.Int32
			var inProgress atomic.Int32
			release := make(chan struct{})
			var wg sync.WaitGroup
			responses := make([]string, callers)
			errs := make([]error, callers)
			for i := range callers {
				wg.Go(func() {
					got, err := s.Do(ctx, "one-key", "fp", func(context.Context) ([]byte, error) {
						runs.Add(1)
						<-release
						return []byte("the response"), nil
					})
					if errors.Is(err, idempotency.ErrInProgress) {
						inProgress.Add(1)
						err = nil
						got = []byte("the response")
					}
					responses[i], errs[i] = string(got), err
				})
			}
			if tt.wait {
				rec.waitFor(t, msgWaiting, callers-1)
			} else {
				for inProgress.Load() < callers-1 {
					if ctx.Err() != nil {
						t.Fatalf("%d callers got ErrInProgress before the deadline", inProgress.Load())
					}
					time.Sleep(2 * time.Millisecond)
				}
			}
			close(release)
			wg.Wait()
			if n := runs.Load(); n != 1 {
				t.Fatalf("fn ran %d times, want 1", n)
			}
			for i := range callers {
				if errs[i] != nil || responses[i] != "the response" {
					t.Fatalf("caller %d: %q, %v", i, responses[i], errs[i])
				}
			}
		})
	}
}

// TestDoWaitEndsWithContext: a caller waiting for a key in progress gives up
// when its ctx ends, with ctx's error, and does not run fn.
func TestDoWaitEndsWithContext(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.New(t)
	s := idempotency.New(db.Pool, idempotency.Options{WaitForInProgress: true, PollInterval: 10 * time.Millisecond})
	held, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := s.Do(ctx, "k", "fp", func(context.Context) ([]byte, error) {
			close(held)
			<-release
			return nil, nil
		})
		done <- err
	}()
	<-held
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err := s.Do(wctx, "k", "fp", func(context.Context) ([]byte, error) {
		t.Error("the waiter ran fn")
		return nil, nil
	})
	// Usually `idempotency: waiting for key "k" in progress: context
	// deadline exceeded`; on a slow machine the deadline may cut a query.
	if !errors.Is(err, context.DeadlineExceeded) || !strings.HasSuffix(err.Error(), "context deadline exceeded") {
		t.Fatalf("error %v, want one that is context.DeadlineExceeded", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
