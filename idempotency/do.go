package idempotency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
// extends the key's lease, each extension waiting no longer than the lease
// has left. If the lease is lost anyway (the process was paused past it and
// another caller took the key over under a greater fence) or runs out
// before an extension succeeds (the database is unreachable, so another
// caller may take the key over), fn's ctx is cancelled, with the
// *StaleFenceError as its cause, and Do returns that *StaleFenceError
// (ErrStaleFence; joined with fn's error if fn failed) without storing fn's
// response: the newer holder's response is the one retries get. The lease
// is counted from when the claim was sent, so by this host's clock it ends
// no later than the database's record of it: fn is cancelled before
// another caller can take the key over, however slow the network.
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
	return s.run(ctx, key, c, fn)
}

// run calls fn while holding key under c's fence and stores its response.
func (s *Store) run(ctx context.Context, key string, c claim, fn func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	fence := c.fence
	stale := &StaleFenceError{Scope: s.opts.Scope, Key: key, Fence: fence}
	fnCtx, cancel := context.WithCancelCause(withFence(ctx, fence))
	defer cancel(nil)
	stopHeartbeat := s.heartbeat(ctx, key, fence, c.held, func() { cancel(stale) })

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

// heartbeat extends key's lease every Options.Heartbeat, from the claim's
// lease that holds until held, until the returned stop is called. It calls
// lost, at once, when an extension finds the key taken over or when the
// lease runs out before an extension succeeded; stop reports whether it
// did.
//
// Each extension waits at most until the lease ends: a holder cut off from
// the database (a partition leaves the query hanging until TCP gives up,
// many minutes later) cannot prove it still holds the key once the lease
// has run out, and another caller may then take the key over, so fn is told
// to stop when the lease ends, not when the network finally says so.
func (s *Store) heartbeat(ctx context.Context, key string, fence int64, held time.Time, lost func()) (stop func() bool) {
	hbCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	exited := make(chan struct{})
	var isLost bool
	loseKey := func(msg string, err error) {
		attrs := []slog.Attr{attrScope(s.opts.Scope), attrKey(key), attrFence(fence)}
		if err != nil {
			attrs = append(attrs, attrErr(err))
		}
		s.opts.Logger.LogAttrs(ctx, slogWarn, msg, attrs...)
		isLost = true
		lost()
	}
	go func() {
		defer close(exited)
		expiry := time.NewTimer(time.Until(held))
		defer expiry.Stop()
		var tick <-chan time.Time // nil, never ready, without heartbeats
		if s.opts.Heartbeat > 0 {
			t := time.NewTicker(s.opts.Heartbeat)
			defer t.Stop()
			tick = t.C
		}
		for {
			select {
			case <-hbCtx.Done():
				return
			case <-expiry.C:
				loseKey(msgLeaseRanOut, nil)
				return
			case <-tick:
			}
			sent := time.Now()
			xCtx, xCancel := context.WithDeadline(hbCtx, held)
			tag, err := s.pool.Exec(xCtx, extendLeaseSQL, s.opts.Scope, key, fence, s.opts.Lease.Microseconds())
			xCancel()
			switch {
			case err != nil && hbCtx.Err() != nil:
				return
			case err != nil && !time.Now().Before(held):
				loseKey(msgLeaseRanOut, err)
				return
			case err != nil:
				s.opts.Logger.LogAttrs(ctx, slogWarn, "idempotency: extend lease failed; retrying while the lease lasts",
					attrScope(s.opts.Scope), attrKey(key), attrFence(fence), attrErr(err))
			case tag.RowsAffected() == 0:
				loseKey("idempotency: lease lost: the key was taken over", nil)
				return
			default:
				held = sent.Add(s.opts.Lease)
				expiry.Reset(time.Until(held))
			}
		}
	}()
	return func() bool {
		cancel()
		<-exited
		return isLost
	}
}

// msgLeaseRanOut is logged when a holder could not extend its lease in time.
const msgLeaseRanOut = "idempotency: lease ran out before it could be extended; fn's context is cancelled"
