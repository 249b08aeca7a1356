package stampede

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/redistest"
)

func TestNewRejectsBadOptions(t *testing.T) {
	client, _ := redistest.Client(t)
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"negative LockTTL", Options{LockTTL: -time.Second}, "stampede: invalid options: LockTTL -1s is below 1ms"},
		{"sub-millisecond LockTTL", Options{LockTTL: time.Microsecond}, "stampede: invalid options: LockTTL 1µs is below 1ms"},
		{"negative WaitTimeout", Options{WaitTimeout: -1}, "stampede: invalid options: WaitTimeout -1ns is negative"},
		{"negative PollInterval", Options{PollInterval: -time.Millisecond}, "stampede: invalid options: PollInterval -1ms is negative"},
		{"NaN Beta", Options{Beta: math.NaN()}, "stampede: invalid options: Beta NaN is not a finite number"},
		{"infinite Beta", Options{Beta: math.Inf(1)}, "stampede: invalid options: Beta +Inf is not a finite number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, err := New[string](client, tt.opts)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("New(%+v) = %v, %v; want error %q", tt.opts, g, err, tt.want)
			}
			if !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("errors.Is(%v, ErrInvalidOptions) = false", err)
			}
		})
	}

	t.Run("nil client", func(t *testing.T) {
		_, err := New[string](nil, Options{})
		if want := "stampede: invalid options: nil redis client"; err == nil || err.Error() != want {
			t.Fatalf("New(nil) error = %v; want %q", err, want)
		}
	})
}

func TestNewDefaults(t *testing.T) {
	client, _ := redistest.Client(t)
	g, err := New[string](client, Options{})
	if err != nil {
		t.Fatal(err)
	}
	o := g.opts
	if o.Prefix != DefaultPrefix || o.LockTTL != DefaultLockTTL || o.WaitTimeout != DefaultWaitTimeout ||
		o.PollInterval != DefaultPollInterval || o.Beta != DefaultBeta || o.ComputeTimeout != DefaultComputeTimeout || o.Codec != (JSONCodec{}) || o.Logger == nil {
		t.Fatalf("defaults = %+v", o)
	}
	if got, want := g.lockKey("k"), "stampede:lock:k"; got != want {
		t.Fatalf("lockKey = %q, want %q", got, want)
	}
}

func TestGetRejectsBadArguments(t *testing.T) {
	client, prefix := redistest.Client(t)
	g := newGuard[string](t, client, prefix, Options{})
	ok := func(context.Context) (string, error) {
		t.Error("compute called for a rejected call")
		return "", nil
	}
	tests := []struct {
		name    string
		key     string
		ttl     time.Duration
		compute func(context.Context) (string, error)
		want    string
	}{
		{"empty key", "", time.Minute, ok, "stampede: invalid argument: empty key"},
		{"zero ttl", "k", 0, ok, `stampede: invalid argument: ttl 0s for key "k" is below 1ms`},
		{"sub-millisecond ttl", "k", time.Microsecond, ok, `stampede: invalid argument: ttl 1µs for key "k" is below 1ms`},
		{"nil compute", "k", time.Minute, nil, `stampede: invalid argument: nil compute for key "k"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := g.Get(t.Context(), tt.key, tt.ttl, tt.compute)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("Get = %q, %v; want error %q", v, err, tt.want)
			}
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("errors.Is(%v, ErrInvalidArgument) = false", err)
			}
		})
	}
	if n, err := client.Keys(t.Context(), prefix+"*").Result(); err != nil || len(n) != 0 {
		t.Fatalf("rejected calls wrote keys %v (err %v)", n, err)
	}
	if s := g.Stats(); s.Calls != 0 || s.Computations != 0 {
		t.Fatalf("rejected calls counted: %+v", s)
	}
}
