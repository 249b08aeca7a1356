package stampede

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/redistest"
)

func TestEntryRoundTrip(t *testing.T) {
	e := entry{expiry: time.UnixMilli(1_900_000_000_123), delta: 1234567 * time.Microsecond, payload: []byte(`{"a":1}`)}
	got, err := decodeEntry(e.encode())
	if err != nil || !got.expiry.Equal(e.expiry) || got.delta != e.delta || string(got.payload) != string(e.payload) {
		t.Fatalf("decode(encode(%+v)) = %+v, %v", e, got, err)
	}
	for _, bad := range [][]byte{nil, []byte("short"), append([]byte{2}, make([]byte, 20)...)} {
		if _, err := decodeEntry(bad); !errors.Is(err, errBadEntry) {
			t.Errorf("decodeEntry(%q) error = %v; want errBadEntry", bad, err)
		}
	}
}

func TestRefreshEarly(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	e := entry{expiry: now.Add(10 * time.Second), delta: time.Second}
	tests := []struct {
		name string
		e    entry
		beta float64
		r    float64
		want bool
	}{
		// gap = delta * beta * -ln(r); refresh when now+gap >= expiry.
		{"r=1 never refreshes", e, 1, 1, false},
		{"gap below the time left", e, 1, math.Exp(-9), false},
		{"gap reaches expiry", e, 1, math.Exp(-10.001), true},
		{"beta scales the gap", e, 10, math.Exp(-1), true},
		{"beta below one delays", e, 0.5, math.Exp(-19), false},
		{"zero delta never refreshes early", entry{expiry: e.expiry}, 1, 1e-300, false},
		{"expired entry always refreshes", entry{expiry: now.Add(-time.Millisecond), delta: time.Second}, 1, 0.999, true},
		{"negative beta disables", entry{expiry: now, delta: time.Hour}, -1, 1e-9, false},
		{"huge gap does not overflow", entry{expiry: now.Add(time.Hour), delta: time.Hour}, 1e12, 1e-300, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.e.refreshEarly(now, tt.beta, tt.r); got != tt.want {
				t.Fatalf("refreshEarly(beta %v, r %v) = %v; want %v", tt.beta, tt.r, got, tt.want)
			}
		})
	}
}

// TestEarlyRefresh: with a Beta that makes XFetch certain, a hit returns
// the stored value and recomputes it in the background before it expires,
// but only when no one else holds the lock; a failed refresh keeps the
// stored value.
func TestEarlyRefresh(t *testing.T) {
	client, prefix := redistest.Client(t)
	certain := newGuard[int](t, client, prefix, Options{Beta: 1e9})
	never := newGuard[int](t, client, prefix, Options{Beta: -1})
	var n atomic.Int64
	compute := func(context.Context) (int, error) {
		time.Sleep(5 * time.Millisecond) // gives the entry a delta
		return int(n.Add(1)), nil
	}
	get := func(g *Guard[int]) int {
		t.Helper()
		v, err := g.Get(t.Context(), "hot", time.Hour, func(context.Context) (int, error) {
			return 0, errors.New("not expected: the key is stored")
		})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v, err := certain.Get(t.Context(), "hot", time.Hour, compute); err != nil || v != 1 {
		t.Fatalf("first Get = %d, %v", v, err)
	}
	if v := get(never); v != 1 || never.Stats().EarlyRefreshes != 0 {
		t.Fatalf("Get without XFetch = %d; want the stored 1 and no refresh", v)
	}
	if v, err := certain.Get(t.Context(), "hot", time.Hour, compute); err != nil || v != 1 {
		t.Fatalf("Get with certain XFetch = %d, %v; want the stored 1 at once", v, err)
	}
	until(t, "the early refresh stores 2", func() bool { return get(never) == 2 })
	if s := certain.Stats(); s.EarlyRefreshes != 1 || s.Computations != 2 || s.Misses != 1 {
		t.Fatalf("stats %+v; want 1 early refresh, 2 computations, 1 miss", s)
	}

	raw, err := client.Get(t.Context(), certain.valueKey("hot")).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	// Someone else is refreshing: keep the stored value, compute nothing.
	lock := prefix + "stampede:lock:hot"
	client.Set(t.Context(), lock, "other", time.Hour)
	if v := certain.refresh(t.Context(), "hot", time.Hour, compute, raw, 2); v != 2 || n.Load() != 2 {
		t.Fatalf("refresh while another holds the lock = %d after %d computations; want 2 after 2", v, n.Load())
	}
	client.Del(t.Context(), lock)

	// A failed refresh keeps the stored value.
	failing := func(context.Context) (int, error) { return 0, errors.New("upstream down") }
	if v := certain.refresh(t.Context(), "hot", time.Hour, failing, raw, 2); v != 2 {
		t.Fatalf("failed refresh = %d; want the stored 2", v)
	}
	if v := get(never); v != 2 {
		t.Fatalf("value after a failed refresh = %d; want 2 still stored", v)
	}
	if n := client.Exists(t.Context(), lock).Val(); n != 0 {
		t.Fatal("refresh left its lock behind")
	}
}
