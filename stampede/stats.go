package stampede

import "sync/atomic"

// Stats is a snapshot of a Guard's counters since New. A flight is one
// in-process computation of a key: callers of Get that arrive while a flight
// for their key is under way share it (Shared) instead of starting their own.
type Stats struct {
	// Calls counts calls of Get.
	Calls uint64
	// Shared counts calls that shared another caller's flight in this
	// process.
	Shared uint64
	// Hits counts flights answered by a stored value at once.
	Hits uint64
	// Misses counts flights that found no usable value.
	Misses uint64
	// Computations counts calls of compute, for whatever reason.
	Computations uint64
	// EarlyRefreshes counts computations started by XFetch on a hit.
	EarlyRefreshes uint64
	// Waits counts flights that found the lock held and waited for the
	// holder's value.
	Waits uint64
	// FailOpens counts waits that ran out (WaitTimeout) and computed
	// without the lock.
	FailOpens uint64
	// ComputeTimeouts counts computations given up after ComputeTimeout.
	ComputeTimeouts uint64
	// LockLost counts locks that expired or were taken by another caller
	// while their computation ran.
	LockLost uint64
	// RedisErrors counts failed Redis operations; each was logged and
	// worked around (computing directly or skipping the write).
	RedisErrors uint64
	// DecodeErrors counts stored entries the codec could not decode; they
	// are treated as misses and overwritten.
	DecodeErrors uint64
}

type counters struct {
	calls, shared, hits, misses, computations, earlyRefreshes,
	waits, failOpens, computeTimeouts, lockLost, redisErrors, decodeErrors atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		Calls:           c.calls.Load(),
		Shared:          c.shared.Load(),
		Hits:            c.hits.Load(),
		Misses:          c.misses.Load(),
		Computations:    c.computations.Load(),
		EarlyRefreshes:  c.earlyRefreshes.Load(),
		Waits:           c.waits.Load(),
		FailOpens:       c.failOpens.Load(),
		ComputeTimeouts: c.computeTimeouts.Load(),
		LockLost:        c.lockLost.Load(),
		RedisErrors:     c.redisErrors.Load(),
		DecodeErrors:    c.decodeErrors.Load(),
	}
}
