package stampede

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"
)

// ErrInvalidArgument is wrapped by the error Get returns for arguments it
// cannot use.
var ErrInvalidArgument = errors.New("stampede: invalid argument")

// ErrCodec is wrapped by the error Get returns when the Codec cannot encode a
// computed value.
var ErrCodec = errors.New("stampede: codec")

// ErrComputePanicked is wrapped by the error Get returns when compute panics.
var ErrComputePanicked = errors.New("stampede: compute panicked")

// ErrComputeTimeout is wrapped by the error Get returns when compute ran
// longer than Options.ComputeTimeout.
var ErrComputeTimeout = errors.New("stampede: compute timed out")

// A Guard stands in front of an expensive computation whose result a fleet
// of processes shares through Redis: for each key, it lets one caller in the
// fleet compute while the others wait for the stored value.
//
// The lock the Guard takes is for efficiency only: if Redis is slow or down,
// or a lock expires while its holder computes, the worst outcome is that the
// value is computed more than once. Get never returns a value it did not get
// from compute or from what a compute stored.
//
// A Guard is safe for concurrent use.
type Guard[V any] struct {
	client redis.UniversalClient
	opts   Options
	group  singleflight.Group // flights of Get by key
	early  singleflight.Group // early refreshes by key
	stats  counters
}

// New returns a Guard that stores values of type V through client.
func New[V any](client redis.UniversalClient, opts Options) (*Guard[V], error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalidOptions)
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Guard[V]{client: client, opts: o}, nil
}

// Stats returns a snapshot of the Guard's counters.
func (g *Guard[V]) Stats() Stats { return g.stats.snapshot() }

// Get returns the value stored for key, computing and storing it for ttl
// when there is none. Across the fleet, one caller computes a missing key
// while the others wait for its value:
//
//   - callers in this process that ask for a key while a call for it is
//     under way share that call (ttl and compute of the first one apply);
//   - the call takes the lock of key in Redis (SET NX PX); the holder
//     computes, stores the value and releases the lock, and a watchdog
//     extends the lock while compute runs;
//   - a call that finds the lock held polls for the value every
//     PollInterval; after WaitTimeout it computes the value itself;
//   - on a hit, XFetch may decide to recompute the value before it expires;
//     the call then returns the stored value at once and starts the
//     recomputation in the background (under the lock, at most one per key
//     in this process), so that a hot key is refreshed while every caller
//     still gets the stored value.
//
// When Redis fails, Get computes the value directly and returns it; the
// Redis error is logged and counted in Stats, not returned.
//
// compute runs with a context that carries ctx's values but is not cancelled
// when callers give up, so that one impatient caller does not fail the
// others sharing the computation; Get itself returns ctx.Err() when ctx ends
// first. compute's context ends after Options.ComputeTimeout, and a compute
// still running then is given up: Get returns an error wrapping
// ErrComputeTimeout, and the key's lock is released. An error from compute
// is returned as is and nothing is stored.
func (g *Guard[V]) Get(ctx context.Context, key string, ttl time.Duration, compute func(ctx context.Context) (V, error)) (V, error) {
	var zero V
	switch {
	case key == "":
		return zero, fmt.Errorf("%w: empty key", ErrInvalidArgument)
	case ttl < time.Millisecond:
		return zero, fmt.Errorf("%w: ttl %v for key %q is below 1ms", ErrInvalidArgument, ttl, key)
	case compute == nil:
		return zero, fmt.Errorf("%w: nil compute for key %q", ErrInvalidArgument, key)
	}
	g.stats.calls.Add(1)
	leader := false
	flight := context.WithoutCancel(ctx)
	ch := g.group.DoChan(key, func() (any, error) {
		leader = true
		return g.load(flight, key, ttl, compute)
	})
	select {
	case r := <-ch:
		if !leader {
			g.stats.shared.Add(1)
		}
		if r.Err != nil {
			return zero, r.Err
		}
		// A nil result of an interface type V is not a V to assert.
		v, _ := r.Val.(V)
		return v, nil
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// load runs one flight for key.
func (g *Guard[V]) load(ctx context.Context, key string, ttl time.Duration, compute func(context.Context) (V, error)) (V, error) {
	raw, err := g.client.Get(ctx, g.valueKey(key)).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
	case err != nil:
		g.redisError("get value", key, err)
		return g.computeUnlocked(ctx, key, ttl, compute, "")
	default:
		if v, e, ok := g.decode(key, raw); ok {
			g.stats.hits.Add(1)
			if e.refreshEarly(time.Now(), g.opts.Beta, 1-rand.Float64()) {
				// Refresh in the background, one at a time per key, and
				// serve the stored value meanwhile: it is still valid.
				g.early.DoChan(key, func() (any, error) {
					return g.refresh(ctx, key, ttl, compute, raw, v), nil
				})
			}
			return v, nil
		}
	}
	g.stats.misses.Add(1)

	token := newToken()
	a, err := g.acquire(ctx, key, token)
	if err != nil {
		g.redisError("take lock", key, err)
		// The SET NX may have landed: the lock is possibly ours and is
		// released only by token.
		return g.computeUnlocked(ctx, key, ttl, compute, token)
	}
	if v, ok := g.settled(ctx, key, token, a); ok {
		return v, nil
	}
	if a.held {
		return g.computeLocked(ctx, key, ttl, compute, token)
	}
	return g.wait(ctx, key, ttl, compute, token)
}

// wait polls for the value of key while another caller holds the lock,
// taking the lock itself if it is freed without a value, and computes
// without the lock after WaitTimeout.
func (g *Guard[V]) wait(ctx context.Context, key string, ttl time.Duration, compute func(context.Context) (V, error), token string) (V, error) {
	g.stats.waits.Add(1)
	deadline := time.Now().Add(g.opts.WaitTimeout)
	for {
		// ctx is the flight's, which callers leaving do not cancel.
		d := g.opts.PollInterval + rand.N(g.opts.PollInterval/4+1)
		time.Sleep(min(d, max(time.Until(deadline), 0)))
		a, err := g.acquire(ctx, key, token)
		if err != nil {
			g.redisError("take lock", key, err)
			return g.computeUnlocked(ctx, key, ttl, compute, token)
		}
		if v, ok := g.settled(ctx, key, token, a); ok {
			return v, nil
		}
		if a.held {
			return g.computeLocked(ctx, key, ttl, compute, token)
		}
		if !time.Now().Before(deadline) {
			g.stats.failOpens.Add(1)
			g.opts.Logger.Warn("stampede: gave up waiting for the lock holder; computing without the lock",
				"key", key, "wait_timeout", g.opts.WaitTimeout)
			return g.computeUnlocked(ctx, key, ttl, compute, "")
		}
	}
}

// settled returns the value a found, if it decodes, releasing the lock if a
// took it.
func (g *Guard[V]) settled(ctx context.Context, key, token string, a attempt) (V, bool) {
	if a.value == nil {
		var zero V
		return zero, false
	}
	v, _, ok := g.decode(key, a.value)
	if ok && a.held {
		g.releaseLogged(ctx, key, token)
	}
	return v, ok
}

// refresh recomputes a hit that XFetch chose, if no other caller is doing so
// already. It returns the stored value when it does not recompute or the
// recomputation fails.
func (g *Guard[V]) refresh(ctx context.Context, key string, ttl time.Duration, compute func(context.Context) (V, error), raw []byte, cached V) V {
	token := newToken()
	a, err := g.acquire(ctx, key, token)
	if err != nil {
		g.redisError("take lock", key, err)
		g.releaseLogged(ctx, key, token)
		return cached
	}
	if !a.held {
		return cached
	}
	if a.value != nil && !bytes.Equal(a.value, raw) {
		// Refreshed by another caller since we read it.
		if v, ok := g.settled(ctx, key, token, a); ok {
			return v
		}
	}
	g.stats.earlyRefreshes.Add(1)
	v, err := g.computeLocked(ctx, key, ttl, compute, token)
	if err != nil {
		g.opts.Logger.Warn("stampede: early refresh failed; keeping the stored value", "key", key, "err", err)
		return cached
	}
	return v
}

// computeLocked computes and stores the value of key while holding the lock
// under token, with a watchdog extending it, then releases the lock.
func (g *Guard[V]) computeLocked(ctx context.Context, key string, ttl time.Duration, compute func(context.Context) (V, error), token string) (V, error) {
	stop, done := make(chan struct{}), make(chan struct{})
	go g.watch(ctx, key, token, stop, done)
	v, err := g.computeAndStore(ctx, key, ttl, compute)
	close(stop)
	<-done
	g.releaseLogged(ctx, key, token)
	return v, err
}

// computeUnlocked computes and stores the value of key without the lock.
// A non-empty token names a lock that may be held (its SET NX failed without
// a reply); it is released by token afterwards.
func (g *Guard[V]) computeUnlocked(ctx context.Context, key string, ttl time.Duration, compute func(context.Context) (V, error), token string) (V, error) {
	v, err := g.computeAndStore(ctx, key, ttl, compute)
	if token != "" {
		g.releaseLogged(ctx, key, token)
	}
	return v, err
}

func (g *Guard[V]) computeAndStore(ctx context.Context, key string, ttl time.Duration, compute func(context.Context) (V, error)) (V, error) {
	var zero V
	start := time.Now()
	v, err := g.run(ctx, key, compute)
	delta := time.Since(start)
	if err != nil {
		return zero, err
	}
	payload, err := g.opts.Codec.Marshal(v)
	if err != nil {
		return zero, fmt.Errorf("%w: encode value of key %q: %w", ErrCodec, key, err)
	}
	b := entry{expiry: time.Now().Add(ttl), delta: delta, payload: payload}.encode()
	if err := g.client.Set(ctx, g.valueKey(key), b, ttl).Err(); err != nil {
		g.redisError("store value", key, err)
	}
	return v, nil
}

// run calls compute, within ComputeTimeout. compute runs in a goroutine of
// its own so that one that ignores its ctx cannot hold the flight, and with
// it the lock's watchdog, past the bound.
func (g *Guard[V]) run(ctx context.Context, key string, compute func(context.Context) (V, error)) (V, error) {
	g.stats.computations.Add(1)
	if g.opts.ComputeTimeout < 0 {
		return g.call(ctx, key, compute)
	}
	timeout := fmt.Errorf("%w: key %q: after %v", ErrComputeTimeout, key, g.opts.ComputeTimeout)
	ctx, cancel := context.WithTimeoutCause(ctx, g.opts.ComputeTimeout, timeout)
	defer cancel()
	type result struct {
		v   V
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := g.call(ctx, key, compute)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		g.stats.computeTimeouts.Add(1)
		g.opts.Logger.Warn("stampede: compute timed out; giving up its lock and its callers",
			"key", key, "compute_timeout", g.opts.ComputeTimeout)
		var zero V
		return zero, timeout
	}
}

// call calls compute, turning a panic into an error.
func (g *Guard[V]) call(ctx context.Context, key string, compute func(context.Context) (V, error)) (v V, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: key %q: %v\n%s", ErrComputePanicked, key, p, debug.Stack())
		}
	}()
	return compute(ctx)
}

func (g *Guard[V]) decode(key string, raw []byte) (V, entry, bool) {
	var v V
	e, err := decodeEntry(raw)
	if err == nil {
		err = g.opts.Codec.Unmarshal(e.payload, &v)
	}
	if err != nil {
		g.stats.decodeErrors.Add(1)
		g.opts.Logger.Warn("stampede: cannot decode stored value; recomputing it", "key", key, "err", err)
		return v, e, false
	}
	return v, e, true
}

func (g *Guard[V]) releaseLogged(ctx context.Context, key, token string) {
	if _, err := g.release(ctx, key, token); err != nil {
		g.redisError("release lock", key, err)
	}
}

func (g *Guard[V]) redisError(op, key string, err error) {
	g.stats.redisErrors.Add(1)
	g.opts.Logger.Warn("stampede: redis error; working without it", "op", op, "key", key, "err", err)
}

func (g *Guard[V]) lockKey(key string) string  { return g.opts.Prefix + "lock:" + key }
func (g *Guard[V]) valueKey(key string) string { return g.opts.Prefix + "val:" + key }
