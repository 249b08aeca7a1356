package pgqueue

// The statements that join jobs to arrays of IDs, for the tests that
// EXPLAIN them (plan_test.go).
var (
	CompleteSQL  = completeSQL
	FinishSQL    = finishSQL
	HeartbeatSQL = heartbeatSQL
	RescueSQL    = rescueSQL
)

// The claim statement, for the test that EXPLAINs it.
var ClaimSQL = claimSQL
