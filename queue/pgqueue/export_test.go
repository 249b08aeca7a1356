package pgqueue

// The statements that join jobs to arrays of IDs, for the tests that
// EXPLAIN them (plan_test.go).
var (
	CompleteSQL  = completeSQL
	FinishSQL    = finishSQL
	HeartbeatSQL = heartbeatSQL
	RescueSQL    = rescueSQL
	ReleaseSQL   = releaseSQL
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
	EnsureSlotsSQL      = ensureSlotsSQL
)

// The columns a move to the finished table copies, for the test that
// checks them against the catalog.
var FinishedColumns = finishedColumns

// PartitionName names a finished-jobs partition of [lo, hi).
var PartitionName = partitionName

// SetTwoRoundTrips has Enqueue send every wake-up after its insert's
// reply (on) or, where it can, in the insert's round trip (off, the
// default), for the benchmark that compares the two.
func SetTwoRoundTrips(c *Client, on bool) { c.twoRoundTrips = on }
