package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Do runs fn at most once per key among the calls that agree on fingerprint
// and returns its response; every later call with the same key, while the
// key is retained, returns the stored response without running fn.
//
// fingerprint identifies the request (for example a hash of its body; see
// Fingerprint). A call with the key of a different fingerprint returns a
// *KeyReusedError (ErrKeyReused) and does not run fn. A call that finds the
// key held by another live caller returns an *InProgressError
// (ErrInProgress), or waits for that caller's response when
// Options.WaitForInProgress is set.
//
// fn runs with the key held under a fence, which FenceFrom(ctx) returns;
// fence fn's own database writes with it (see Fenced). While fn runs Do
// extends the key's lease; if the lease is lost anyway (the process was
// paused past it and another caller took the key over under a greater
// fence), fn's ctx is cancelled and Do returns a *StaleFenceError
// (ErrStaleFence; joined with fn's error if fn failed) without storing fn's
// response: the newer holder's response is the one retries get.
//
// When fn returns an error Do deletes the key, so the next call runs fn
// again, and returns that error unchanged. To remember a failure, return it
// as a response instead.
func (s *Store) Do(ctx context.Context, key, fingerprint string, fn func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	if err := s.validate(key, fingerprint); err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, errors.New("jobfence: idempotency: Do: fn is nil")
	}
	c, err := s.claimKey(ctx, s.pool, key, fingerprint, false)
	if err != nil {
		return nil, err
	}
	if c.replayed {
		return c.response, nil
	}
	return s.run(ctx, key, c.fence, fn)
}

// run calls fn while holding key under fence and stores its response.
func (s *Store) run(ctx context.Context, key string, fence int64, fn func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	stale := &StaleFenceError{Scope: s.opts.Scope, Key: key, Fence: fence}
	fnCtx, cancel := context.WithCancelCause(withFence(ctx, fence))
	defer cancel(nil)
	stopHeartbeat := s.heartbeat(ctx, key, fence, func() { cancel(stale) })

	// The cleanup statements run even when the caller's ctx is done: the
	// key must be completed or released either way.
	cleanup := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), s.opts.Lease)
	}
	returned := false
	defer func() {
		if !returned { // fn panicked: let the next call run it
			stopHeartbeat()
			cleanupCtx, cancel := cleanup()
			defer cancel()
			s.release(cleanupCtx, key, fence)
		}
	}()
	resp, err := fn(fnCtx)
	returned = true
	lost := stopHeartbeat()
	cleanupCtx, cleanupCancel := cleanup()
	defer cleanupCancel()
	if lost {
		s.opts.Logger.LogAttrs(ctx, slogWarn, "idempotency: lease lost while running; response not stored",
			attrScope(s.opts.Scope), attrKey(key), attrFence(fence))
		if err != nil {
			return nil, errors.Join(stale, err)
		}
		return nil, stale
	}
	if err != nil {
		s.release(cleanupCtx, key, fence)
		return nil, err
	}
	tag, err := s.pool.Exec(cleanupCtx, completeKeySQL, s.opts.Scope, key, fence, resp, s.opts.Retention.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("idempotency: complete key %q: %w", key, err)
	}
	if tag.RowsAffected() == 0 {
		s.opts.Logger.LogAttrs(ctx, slogWarn, "idempotency: stale completion rejected; a newer holder took the key over",
			attrScope(s.opts.Scope), attrKey(key), attrFence(fence))
		return nil, stale
	}
	return resp, nil
}

// release deletes key if fence still holds it; a failure is logged, and the
// key then frees itself when its lease runs out.
func (s *Store) release(ctx context.Context, key string, fence int64) {
	if _, err := s.pool.Exec(ctx, releaseKeySQL, s.opts.Scope, key, fence); err != nil {
		s.opts.Logger.LogAttrs(ctx, slogWarn, "idempotency: release key failed; it frees itself when its lease runs out",
			attrScope(s.opts.Scope), attrKey(key), attrFence(fence), attrErr(err))
	}
}

// heartbeat extends key's lease every Options.Heartbeat until the returned
// stop is called; stop reports whether the lease was found lost, in which
// case lost was called as soon as that was seen.
func (s *Store) heartbeat(ctx context.Context, key string, fence int64, lost func()) (stop func() bool) {
	if s.opts.Heartbeat < 0 {
		return func() bool { return false }
	}
	hbCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	exited := make(chan struct{})
	var isLost bool
	go func() {
		defer close(exited)
		t := time.NewTicker(s.opts.Heartbeat)
		defer t.Stop()
		// held is how long the lease surely holds: the claim's lease, then
		// each successful extension's. A holder that cannot reach the
		// database cannot prove it still holds the key once that passes,
		// and another caller may take it over, so fn is told to stop.
		held := time.Now().Add(s.opts.Lease)
		for {
			select {
			case <-hbCtx.Done():
				return
			case <-t.C:
			}
			sent := time.Now()
			tag, err := s.pool.Exec(hbCtx, extendLeaseSQL, s.opts.Scope, key, fence, s.opts.Lease.Microseconds())
			if err != nil {
				if hbCtx.Err() != nil {
					return
				}
				s.opts.Logger.LogAttrs(ctx, slogWarn, "idempotency: extend lease failed",
					attrScope(s.opts.Scope), attrKey(key), attrFence(fence), attrErr(err))
				if time.Now().After(held) {
					isLost = true
					lost()
					return
				}
				continue
			}
			held = sent.Add(s.opts.Lease)
			if tag.RowsAffected() == 0 {
				isLost = true
				lost()
				return
			}
		}
	}()
	return func() bool {
		cancel()
		<-exited
		return isLost
	}
}
