// Package stampede stops cache stampedes across a fleet: when a cached value
// is missing or about to expire, one caller in the fleet recomputes it while
// the others wait for its result.
//
// A [Guard] stores values in Redis with their expiry and the time they took
// to compute. [Guard.Get] returns the stored value, or computes it under a
// Redis lock (SET NX PX with a random token; released and extended only by
// token-checked Lua scripts) so that a cold key under heavy concurrent load is
// computed once. Callers in one process share one call first
// (golang.org/x/sync/singleflight); callers that lose the lock poll for the
// value and compute it themselves after Options.WaitTimeout. Hot keys are
// refreshed before they expire by probabilistic early refresh (XFetch, Vattani
// et al., "Optimal Probabilistic Cache Stampede Prevention", VLDB 2015).
//
// # The lock is for efficiency only
//
// A lock in Redis is a lease: a holder that pauses (GC, a slow disk, a
// stopped VM) cannot see its lease expire, and Redis can lose or refuse it.
// So nothing here depends on the lock for correctness. When Redis is slow or
// down, Get computes the value directly; when a lock expires while its holder
// computes, another caller may compute too; when a waiter gives up, it
// computes too. In every case the cost is a duplicate computation of the same
// function, never a missing value or one the function did not compute. The
// one thing a lost lock can cost beyond work is freshness: a holder that
// paused past its lock may store its result after a newer one, so the cache
// can hold a value one computation older until its ttl ends. Do not use this package to
// protect an action that must happen once (a payment, an email): use the
// fenced job queue and idempotency keys of jobfence for that.
//
// # Counters
//
// [Guard.Stats] returns hits, misses, computations, waits, fail-opens, locks
// lost and absorbed Redis errors. Export them with expvar, for example:
//
//	expvar.Publish("report_cache", expvar.Func(func() any { return guard.Stats() }))
//
// See docs/stampede.md.
package stampede
