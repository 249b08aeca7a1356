package pgqueue

import (
	"fmt"
	"strconv"
)

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

// fairScanMax bounds the fair keys one grant of a partition reads
// (fairWaitingSQL): its free slots, and fairScanSlack more, at most this.
const (
	fairScanMax   = 100
	fairScanSlack = 4
)

// fairKeysSQL is a loose index scan of jobfence_jobs_limited_fair: the
// fair keys of the partition (k.n, k.pt) with waiting jobs that cond
// bounds (on limit_fair), in key order, one index entry each, numbered
// from first on, up to fairScanMax in all (the CTE t).
func fairKeysSQL(cte, k, cond, first string) string {
	return cte + `(fair, pos) AS (
            (SELECT limit_fair, ` + first + ` FROM jobfence_jobs
             WHERE state = 'limited' AND limit_fair IS NOT NULL AND limit_name = ` + k + `.n AND limit_part = ` + k + `.pt AND ` + cond + `
             ORDER BY limit_fair LIMIT 1)
            UNION ALL
            SELECT x.limit_fair, ` + cte + `.pos + 1 FROM ` + cte + ` CROSS JOIN LATERAL (
                SELECT limit_fair FROM jobfence_jobs
                WHERE state = 'limited' AND limit_fair IS NOT NULL AND limit_name = ` + k + `.n AND limit_part = ` + k + `.pt
                  AND limit_fair > ` + cte + `.fair AND ` + cond + `
                ORDER BY limit_fair LIMIT 1) x
            WHERE ` + cte + `.pos < least(` + k + `.k + ` + strconv.Itoa(fairScanSlack) + `, ` + strconv.Itoa(fairScanMax) + `)
        )`
}

// fairWaitingSQL selects, for the fair partition of the row k (its name
// n, part pt, free slots k, weights wts and round-robin cursor: the key
// cur its last grant served last, which had taken jobs of its turn), up
// to k.k of its waiting jobs in weighted round-robin order across their
// fair keys, each locked with SKIP LOCKED: a subquery run once a
// partition (LATERAL). Its rows are a job's id, its key (fair), its
// place in the order (rnd, the turn it falls in; pos, its key's place in
// a turn; j, its place among its key's jobs) and how many jobs its key
// has had in that turn with it (turn), which becomes the cursor if it
// is the last job granted.
//
// The keys are read from the cursor's on, then from the first up to it
// (a wrap-around), each through one entry of jobfence_jobs_limited_fair
// (fairKeysSQL), up to the free slots and fairScanSlack more, and
// fairScanMax in all; then each key's oldest jobs, as many as the turns
// the free slots span could give it. A key with weight w has w jobs a
// turn, the cursor's key w less those it had already. A key's jobs are
// matched by a range of the key (>= and <=), not by equality, so that
// the order asked (the key, then the ID) is jobfence_jobs_limited_fair's
// alone: with an equality, or the key as an array's one element, a
// generic plan read the key's jobs through jobfence_jobs_limited in ID
// order, past every other key's backlog (TestFairGrantReadsNoBacklog).
// So a grant reads a few index entries a slot, however many jobs and
// keys wait, and a key that has waiting jobs is served within one turn
// of every other key's (the sum of the other keys' weights) of the
// partition's grants; a key whose jobs another grant holds, or past
// their deadline, is passed over, and the slack keeps the grant from
// leaving slots free for them. Two grants that read the same cursor at
// once may serve the same key twice (the second its next job): the rule
// holds grant by grant.
func fairWaitingSQL(k string) string {
	return `SELECT f.id, f.fair, f.rnd, f.pos, f.j, f.turn FROM (
        WITH RECURSIVE ` + fairKeysSQL("t", k, "limit_fair >= coalesce("+k+".cur, '')", "1") + `, ` +
		fairKeysSQL("u", k, "limit_fair < "+k+".cur", "(SELECT count(*) FROM t)::int + 1") + `, v AS MATERIALIZED (
            SELECT v.fair, v.pos, coalesce((` + k + `.wts ->> v.fair)::int, 1) AS w,
                CASE WHEN v.fair = ` + k + `.cur THEN ` + k + `.taken ELSE 0 END AS off
            FROM (SELECT fair, pos FROM t UNION ALL SELECT fair, pos FROM u) v
            WHERE v.pos <= ` + strconv.Itoa(fairScanMax) + `
        ), sw AS MATERIALIZED (
            SELECT greatest(sum(w), 1)::int AS s FROM v
        )
        SELECT c.id, v.fair, (c.j + v.off) / v.w AS rnd, v.pos, c.j, (c.j + v.off) % v.w + 1 AS turn
        FROM v CROSS JOIN LATERAL (
            SELECT q.id, row_number() OVER (ORDER BY q.id) - 1 AS j FROM (
                SELECT id FROM jobfence_jobs
                WHERE state = 'limited' AND limit_fair IS NOT NULL AND limit_name = ANY (ARRAY[` + k + `.n]) AND limit_part = ` + k + `.pt
                  AND limit_fair >= v.fair AND limit_fair <= v.fair AND NOT coalesce(deadline <= statement_timestamp(), false)
                ORDER BY limit_name, limit_part, limit_fair, id
                LIMIT least(` + k + `.k, v.w * (` + k + `.k / (SELECT s FROM sw) + 2))
                FOR UPDATE SKIP LOCKED) q
        ) c
        ORDER BY (c.j + v.off) / v.w, v.pos, c.j
        LIMIT ` + k + `.k
    ) f`
}
