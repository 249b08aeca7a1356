package pgqueue

import "fmt"

// partition names one partition of a limit.
type partition struct{ name, part string }

// partitionSet gathers the partitions of a batch's jobs once each, in the
// order they first came: the grants that follow serve each once. A map
// finds them, so a batch over many partitions is not compared job by job
// with all those before it.
type partitionSet struct {
	list []partition
	seen map[partition]bool
}

// add adds p unless it is there already.
func (s *partitionSet) add(p partition) {
	if s.seen[p] {
		return
	}
	if s.seen == nil {
		s.seen = map[partition]bool{}
	}
	s.seen[p] = true
	s.list = append(s.list, p)
}

// waitingInSQL is the condition that a job's entry in jobfence_jobs_limited
// (its columns prefixed with alias) lies in the partition (name, part):
// a range of the index's keys, which the planner reads in their order.
// It serves the tests of whether a partition has waiting jobs (EXISTS, a
// few a statement), which a join on equalities could turn into a hash of
// every partition's waiting jobs; oldestWaitingSQL reads the jobs
// themselves.
func waitingInSQL(alias, name, part string) string {
	return fmt.Sprintf(`(%[1]slimit_name, %[1]slimit_part, %[1]sid) > (%[2]s, %[3]s, 0)
    AND (%[1]slimit_name, %[1]slimit_part, %[1]sid) <= (%[2]s, %[3]s, 9223372036854775807)`, alias, name, part)
}

// oldestWaitingSQL selects cols of the partition (name, part)'s limited
// jobs in insert order, up to limit, locked as lock says, where cond
// holds (a condition on the partition's own row, or true): a subquery run
// once a partition (LATERAL), which names the partition from a row of its
// own. The partition's index entries are found by equality, which
// positions the scan at once, where waitingInSQL's range of row values
// cost several times as much a partition (docs/benchmarks/limits.md,
// change 14). The limit's name is matched as an array's one element, not
// by equality, so that the planner cannot take it for a constant and drop
// it from the order: the order stays the index's, which no other index
// gives, so the primary key in ID order, past every other job of the
// table (change 2), is never a way to it; with plain equalities,
// TestHandOverReadsOnlyWhatItHands fails.
//
// A job whose deadline has passed is passed over: it must not start, and
// a slot handed to it would be lost until its discard, or for good under
// FailureHalt, where a discarded holder keeps its slot. The promoter's
// sweep discards it (promoteSQL). The statement's own time is the one a
// hand-over's claim records (attempted_at), past which a worker discards
// the job unrun, so a hand-over never claims such a job.
func oldestWaitingSQL(cols, cond, name, part, limit, lock string) string {
	return `SELECT ` + cols + ` FROM jobfence_jobs
            WHERE ` + cond + ` AND state = 'limited' AND limit_name = ANY (ARRAY[` + name + `]) AND limit_part = ` + part + `
              AND NOT coalesce(deadline <= statement_timestamp(), false)
            ORDER BY limit_name, limit_part, id
            LIMIT ` + limit + ` ` + lock
}

// nextWaitingSQL selects cols of the partition (name, part)'s oldest
// limited jobs, up to limit, each locked with SKIP LOCKED: the oldest that
// no other transaction holds; or, where ordered (a sequence's), the
// oldest alone, if no other transaction holds it, so that none is passed
// over (handOverSQL, grantConcurrencySQL).
func nextWaitingSQL(cols, ordered, name, part, limit string) string {
	return `SELECT ` + cols + ` FROM (
            ` + oldestWaitingSQL(cols, "NOT "+ordered, name, part, limit, "FOR UPDATE SKIP LOCKED") + `) u
        UNION ALL
        SELECT ` + cols + ` FROM (
            SELECT ` + cols + ` FROM jobfence_jobs
            WHERE ` + ordered + ` AND state = 'limited' AND id = (` + oldestWaitingSQL("id", "true", name, part, "1", "") + `)
            FOR UPDATE SKIP LOCKED) q`
}
