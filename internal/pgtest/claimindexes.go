package pgtest

import (
	"context"
	"testing"
)

// The two sets of indexes the claim has had, for UseClaimIndexes: one
// index for the three waiting states (migrations 1 to 5), and one for
// available jobs beside one by time for scheduled and retryable jobs and
// one for running jobs (migration 6). Code that reads jobs by state, such
// as pgqueue.Client.Queues, must be fast with either while databases
// migrate.
const (
	ClaimIndex      = "claim index"
	PerStateIndexes = "per-state indexes"
)

// claimIndexSQL is each set's DDL, as its migration creates it, after
// dropping the other set.
func claimIndexSQL(set string) []string {
	switch set {
	case ClaimIndex:
		return []string{
			`DROP INDEX IF EXISTS jobfence_jobs_available`,
			`DROP INDEX IF EXISTS jobfence_jobs_waiting`,
			`DROP INDEX IF EXISTS jobfence_jobs_running`,
			`CREATE INDEX IF NOT EXISTS jobfence_jobs_claim ON jobfence_jobs (queue, priority, scheduled_at, id)
			 WHERE state IN ('available', 'scheduled', 'retryable')`,
			`CREATE INDEX IF NOT EXISTS jobfence_jobs_lease ON jobfence_jobs (lease_expires_at) WHERE lease_expires_at IS NOT NULL`,
		}
	case PerStateIndexes:
		return []string{
			`DROP INDEX IF EXISTS jobfence_jobs_claim`,
			`DROP INDEX IF EXISTS jobfence_jobs_lease`,
			`CREATE INDEX IF NOT EXISTS jobfence_jobs_available ON jobfence_jobs (queue, priority, scheduled_at, id) WHERE state = 'available'`,
			`CREATE INDEX IF NOT EXISTS jobfence_jobs_waiting ON jobfence_jobs (scheduled_at) WHERE state IN ('scheduled', 'retryable')`,
			`CREATE INDEX IF NOT EXISTS jobfence_jobs_running ON jobfence_jobs (attempted_at)
			 WHERE state = 'running' AND attempted_at IS NOT NULL`,
		}
	}
	return nil
}

// UseClaimIndexes gives db's schema the set of claim indexes named
// (ClaimIndex or PerStateIndexes), whichever its migrations made, and
// analyzes the table so that the planner knows them.
func UseClaimIndexes(tb testing.TB, db *DB, set string) {
	tb.Helper()
	sqls := claimIndexSQL(set)
	if sqls == nil {
		tb.Fatalf("pgtest: no claim index set %q: want %q or %q", set, ClaimIndex, PerStateIndexes)
	}
	for _, sql := range append(sqls, "ANALYZE jobfence_jobs") {
		if _, err := db.Pool.Exec(context.Background(), sql); err != nil {
			tb.Fatalf("pgtest: %s: %v", sql, err)
		}
	}
}
