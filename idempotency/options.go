package idempotency

import (
	"context"
	"log/slog"
	"time"
)

// Defaults of Options.
const (
	// DefaultScope is the scope of a Store whose Options.Scope is empty.
	DefaultScope = "default"
	// DefaultLease is how long a caller holds an in-progress key without
	// extending it.
	DefaultLease = 30 * time.Second
	// DefaultRetention is how long a completed key, and its response, is kept.
	DefaultRetention = 24 * time.Hour
	// DefaultPollInterval is how often a caller waiting for an in-progress
	// key looks again.
	DefaultPollInterval = 100 * time.Millisecond
)

// Options tunes a Store. The zero value works: every zero field takes its
// default.
type Options struct {
	// Scope is the namespace of the Store's keys: the same key in two scopes
	// names two independent operations. Use one scope per operation or per
	// tenant ("charge", "tenant-42"). Default DefaultScope.
	Scope string
	// Lease is how long a caller of Do holds an in-progress key. While fn
	// runs, Do extends the lease every Heartbeat; a caller that stops (its
	// process paused or dead) loses the key when the lease runs out, and the
	// next caller takes it over under a greater fence. Zero or less means
	// DefaultLease.
	Lease time.Duration
	// Heartbeat is how often Do extends the lease while fn runs; keep it
	// well under Lease. Zero means Lease/3; a negative value never extends
	// it: fn's ctx is then cancelled when the lease runs out, the next
	// caller may take the key over, and Do returns ErrStaleFence.
	Heartbeat time.Duration
	// Retention is how long a completed key is kept: retries within it get
	// the stored response; after it the key is free to use again and Prune
	// deletes it. Zero or less means DefaultRetention.
	Retention time.Duration
	// WaitForInProgress makes a call that finds its key in progress wait for
	// the holder's response (or for its lease to run out, and then take the
	// key over) instead of returning an *InProgressError at once. The wait
	// ends with ctx.
	WaitForInProgress bool
	// PollInterval is how often a waiting call looks at the key again. Zero
	// or less means DefaultPollInterval.
	PollInterval time.Duration
	// Logger receives takeovers of abandoned keys and stale completions.
	// Nil logs nothing.
	Logger *slog.Logger
	// OnEvent, if set, is told of every run, takeover, replay, key reuse
	// and in-progress conflict, on the caller's goroutine: it must return
	// quickly. telemetry.Idempotency sets it.
	OnEvent func(ctx context.Context, e Event)
}

func (o Options) withDefaults() Options {
	if o.Scope == "" {
		o.Scope = DefaultScope
	}
	if o.Lease <= 0 {
		o.Lease = DefaultLease
	}
	if o.Heartbeat == 0 {
		o.Heartbeat = o.Lease / 3
	}
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}
