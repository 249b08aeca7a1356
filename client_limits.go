package jobfence

import (
	"context"

	"github.com/jobfence/jobfence/queue/pgqueue"
)

// The types of the limit methods; each is the pgqueue type, not a copy.
type (
	// Limit is flow control for the jobs of a queue, or of one kind in
	// it, across the fleet: at most Concurrency hold a slot at once, at
	// most Rate start per Period, per partition (PartitionBy), or one at a
	// time in insert order (Sequence). See pgqueue.Limit and
	// docs/limits.md.
	Limit = pgqueue.Limit

	// FailurePolicy says whether a failed job keeps its limit's slot
	// (Limit.OnFailure). See pgqueue.FailurePolicy.
	FailurePolicy = pgqueue.FailurePolicy

	// LimitUse is a limit with its use now: slots held, rate slots
	// granted within its period, jobs waiting. See pgqueue.LimitUse.
	LimitUse = pgqueue.LimitUse

	// InvalidLimitError reports a Limit that Limits().Set refuses, naming
	// the field and what is wrong with it.
	InvalidLimitError = pgqueue.InvalidLimitError
)

// The failure policies of a limit (Limit.OnFailure).
const (
	// FailureRelease: a job waiting to be retried holds no slot (the
	// default, but for a Sequence).
	FailureRelease = pgqueue.FailureRelease
	// FailureHold: a job waiting to be retried keeps its slot through its
	// backoff (the default of a Sequence).
	FailureHold = pgqueue.FailureHold
	// FailureHalt: as FailureHold, and a discarded job keeps its slot too,
	// halting its partition until it is retried or cancelled.
	FailureHalt = pgqueue.FailureHalt
)

// ErrLimitNotFound reports a limit name that no stored limit has
// (Limits().Delete).
var ErrLimitNotFound = pgqueue.ErrLimitNotFound

// Limits returns the handle on the fleet's limits, stored in the
// database so that every instance obeys them. Every client has it,
// insert-only included.
func (c *Client) Limits() Limits { return Limits{c: c} }

// Limits sets, deletes and lists the fleet's limits through a Client
// (Client.Limits); the methods pass to the pgqueue.Client's.
type Limits struct{ c *Client }

// Set stores l, or replaces the stored limit of its name; every instance
// applies it at its next grant. A Limit that cannot be used is an error
// wrapping an *InvalidLimitError naming the field. See
// pgqueue.Client.SetLimit for what a change does to the jobs it governs.
func (l Limits) Set(ctx context.Context, limit Limit) error {
	return l.c.pg.SetLimit(ctx, limit)
}

// Delete removes the limit name: its waiting jobs become available, and
// jobs inserted from then on are not limited. An unknown name wraps
// ErrLimitNotFound.
func (l Limits) Delete(ctx context.Context, name string) error {
	return l.c.pg.DeleteLimit(ctx, name)
}

// List returns the stored limits, by name.
func (l Limits) List(ctx context.Context) ([]Limit, error) {
	return l.c.pg.Limits(ctx)
}

// Uses returns every limit with its use now, by name; waiting counts stop
// at pgqueue.Config.CountCap (10,000 by default), which
// LimitUse.WaitingCapped reports.
func (l Limits) Uses(ctx context.Context) ([]LimitUse, error) {
	return l.c.pg.LimitUses(ctx)
}
