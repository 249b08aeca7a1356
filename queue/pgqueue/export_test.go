package pgqueue

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/jobfence/jobfence/queue"
)

// The statements that join jobs to arrays of IDs, for the tests that
// EXPLAIN them (plan_test.go).
var (
	CompleteSQL  = completeSQL
	FinishSQL    = finishSQL
	HeartbeatSQL = heartbeatSQL
	RescueSQL    = rescueSQL
	ReleaseSQL   = releaseSQL
)

// ReleaseRangeSQL releases one range of a fan-out's dependents after
// its root's completion committed; the Claim statements are the two that
// claim the dependents they release for a worker.
var (
	ReleaseRangeSQL      = releaseRangeSQL
	ReleaseClaimSQL      = releaseClaimSQL
	ReleaseRangeClaimSQL = releaseRangeClaimSQL
)

// The claim statement and the read of its jobs, for the tests that
// EXPLAIN them.
var (
	ClaimSQL   = claimSQL
	ClaimedSQL = claimedSQL
)

// The turn a claim waits for and its bound, for the tests that hold one
// and read the bound.
var (
	ClaimTurnSQL          = claimTurnSQL
	ClaimTurnWaitSQL      = claimTurnWaitSQL
	ClaimTurnWaitResetSQL = claimTurnWaitResetSQL
)

// WakeSQL is the wake-up an insert sends in a transaction of its own.
const WakeSQL = wakeSQL

// The grant's statements, for the test that EXPLAINs them.
var (
	GrantSQL            = grantSQL
	GrantConcurrencySQL = grantConcurrencySQL
	HandOverSQL         = handOverSQL
	EnsureSlotsSQL      = ensureSlotsSQL
)

// The columns a move to the finished table copies, for the test that
// checks them against the catalog.
var FinishedColumns = finishedColumns

// PartitionName names a finished-jobs partition of [lo, hi).
var PartitionName = partitionName

// TwoRoundTripEnqueue is c's Enqueue sending every wake-up after its
// insert's reply, never in the insert's round trip, for the benchmark
// that compares the two.
func TwoRoundTripEnqueue(c *Client) func(context.Context, queue.EnqueueParams) (queue.EnqueueResult, error) {
	return func(ctx context.Context, p queue.EnqueueParams) (queue.EnqueueResult, error) {
		return c.enqueueOne(ctx, p, false)
	}
}

// SetClaimTook makes c pace its claims of q as if its last one had taken
// took (see claimPace): an hour keeps its next claim from reading the
// queue's start, however long the test has taken since the last claim
// that did; zero lets it once headIntervalMin has passed.
func SetClaimTook(c *Client, q string, took time.Duration) { c.paces.get(q).claimed(took) }

// HoldWake marks q's wake-up in flight from c, as an insert's is from
// the moment its batch is sent until its reply is in, and returns what
// ends it as that insert would (wakes.done, and the follow-up it sends).
func HoldWake(c *Client, q string) (release func()) {
	if c.wakes.take(q) != wakeSend {
		panic("HoldWake: a wake-up of " + q + " is already in flight")
	}
	return func() { c.wakeDone(context.Background(), q) }
}

// WakesSent counts the wake-ups that c's coalescer has let out.
func WakesSent(c *Client) int64 { return c.wakes.sent.Load() }

// WakesInFlight counts the queues whose wake-up is in flight from c.
func WakesInFlight(c *Client) int {
	c.wakes.mu.Lock()
	defer c.wakes.mu.Unlock()
	return len(c.wakes.flying)
}

// WakeSenders counts c's background senders of wake-ups still running.
func WakeSenders(c *Client) int64 { return c.wakes.running.Load() }

// PromoteSQL is promoteSQL, for the test that no statement which makes
// jobs ready notifies inside its transaction.
var PromoteSQL = promoteSQL

// LateTasksSQL is lateTasksSQL, for the test that the deadline sweep
// reads its index (PromoteSQL too).
var LateTasksSQL = lateTasksSQL

// QueuesStatement and QueuesSettingsSQL are Queues' statement and its
// settings, for the test that EXPLAINs them.
var (
	QueuesStatement   = queuesStatement
	QueuesSettingsSQL = queuesSettingsSQL
)

// SetAwaitHook has c call f each time an await has found its job or
// workflow unfinished and is about to wait: a test then knows the waiter
// is past its first read.
func SetAwaitHook(c *Client, f func()) { c.awaitHook = f }

// ListQuery is listQuery, for plan tests.
func ListQuery(p ListParams) (string, []any) {
	if p.Limit == 0 {
		p.Limit = 100
	}
	if p.ScanLimit == 0 {
		p.ScanLimit = DefaultScanLimit
	}
	return listQuery(p, pgtype.UUID{})
}

// SetSeriesClock makes c's per-minute series read the time from now, so
// that a test can move to the next minute.
func SetSeriesClock(c *Client, now func() time.Time) { c.series.now = now }

// WaitQuantile is waitQuantile, for the unit test of the quantiles.
var WaitQuantile = waitQuantile
