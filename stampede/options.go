package stampede

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"
)

// Defaults used for the zero fields of Options.
const (
	DefaultPrefix       = "stampede:"
	DefaultLockTTL      = 10 * time.Second
	DefaultWaitTimeout  = 5 * time.Second
	DefaultPollInterval = 50 * time.Millisecond
	DefaultBeta         = 1.0
	// DefaultComputeTimeout bounds one computation.
	DefaultComputeTimeout = time.Minute
)

// ErrInvalidOptions is wrapped by the error New returns for Options it cannot
// use.
var ErrInvalidOptions = errors.New("stampede: invalid options")

// Options configures a Guard. The zero value works: every zero field takes the
// default named in its comment.
type Options struct {
	// Prefix is put in front of every Redis key the Guard writes: values live
	// at Prefix+"val:"+key and locks at Prefix+"lock:"+key.
	// Default DefaultPrefix ("stampede:").
	Prefix string

	// LockTTL is the lifetime of a recomputation lock. A watchdog extends it
	// every LockTTL/3 while the computation runs, so it bounds how long a
	// crashed holder blocks others, not how long a computation may take.
	// Default DefaultLockTTL (10s); at least 1ms.
	LockTTL time.Duration

	// WaitTimeout bounds how long a caller that lost the lock waits for the
	// holder's value before computing the value itself (fail open). Set it
	// above the usual computation time: a computation that takes longer is
	// duplicated by every waiting instance. Default DefaultWaitTimeout (5s).
	WaitTimeout time.Duration

	// PollInterval is how often a waiting caller looks for the value (and
	// for a lock given up without a value). Each wait is jittered by up to
	// a quarter. Default DefaultPollInterval (50ms).
	PollInterval time.Duration

	// Beta scales probabilistic early refresh (XFetch): a hit is recomputed
	// early when now - delta*Beta*ln(rand) >= expiry, delta being how long
	// the value took to compute. Values above 1 refresh earlier, below 1
	// later. Default DefaultBeta (1); a negative Beta turns early refresh
	// off.
	Beta float64

	// ComputeTimeout bounds one computation. compute's ctx ends when it
	// passes, and the flight stops waiting for compute then: Get returns
	// an error wrapping ErrComputeTimeout to the callers sharing the
	// flight, the lock is no longer extended and is released, and callers
	// waiting in other processes take the lock or fail open as after any
	// failed computation. A compute that ignores its ctx runs on in its
	// goroutine, but holds neither the key's flight nor its lock. Default
	// DefaultComputeTimeout (1m); a negative value means no bound.
	ComputeTimeout time.Duration

	// Codec serializes values. Default JSONCodec.
	Codec Codec

	// Logger receives the errors the Guard absorbs (Redis unavailable, lock
	// lost, undecodable entries). Default slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults() (Options, error) {
	bad := func(format string, args ...any) (Options, error) {
		return o, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, args...)...)
	}
	switch {
	case o.LockTTL < 0 || (o.LockTTL > 0 && o.LockTTL < time.Millisecond):
		return bad("LockTTL %v is below 1ms", o.LockTTL)
	case o.WaitTimeout < 0:
		return bad("WaitTimeout %v is negative", o.WaitTimeout)
	case o.PollInterval < 0:
		return bad("PollInterval %v is negative", o.PollInterval)
	case math.IsNaN(o.Beta) || math.IsInf(o.Beta, 0):
		return bad("Beta %v is not a finite number", o.Beta)
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.LockTTL == 0 {
		o.LockTTL = DefaultLockTTL
	}
	if o.WaitTimeout == 0 {
		o.WaitTimeout = DefaultWaitTimeout
	}
	if o.PollInterval == 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.ComputeTimeout == 0 {
		o.ComputeTimeout = DefaultComputeTimeout
	}
	if o.Beta == 0 {
		o.Beta = DefaultBeta
	}
	if o.Codec == nil {
		o.Codec = JSONCodec{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}
