package pgqueue

import (
	"strings"

	"github.com/jobfence/jobfence/queue"
)

// The conditions and settings that the statements moving jobs share,
// written once beside the state machine's table (queue.StateRules,
// queue.Transitions, docs/states.md) and built from it where it says
// what a state holds. Every statement that moves a job names its rows in
// a "transition:" comment; docs/states.md lists them by row, so that
// every way into and out of a state is found from there.

// holdsSQL says, in a statement that names the job j, its limit's row l
// and a slot s, that j holds s: it was granted s and its state keeps it
// (holdingSQL).
var holdsSQL = `j.limit_name = s.name AND j.limit_part = s.part AND j.limit_slot = s.slot
    AND ` + holdingSQL("j", "l")

// holdingSQL says that the job j (an alias), under its limit's row l,
// is in a state that keeps the concurrency slot it was granted: the Slot
// column of the state machine's table (queue.StateRules), written once
// here for every statement that asks (the grants, the hand-over, the
// limits' counts). A job that names a slot in another state has freed it.
func holdingSQL(j, l string) string {
	var always, retrying, discarded []string
	for _, r := range queue.StateRules() {
		switch r.Slot {
		case queue.HoldAlways:
			always = append(always, "'"+string(r.State)+"'")
		case queue.HoldIfRetrying:
			retrying = append(retrying, "'"+string(r.State)+"'")
		case queue.HoldIfDiscarded:
			discarded = append(discarded, "'"+string(r.State)+"'")
		}
	}
	return "(" + j + ".state IN (" + strings.Join(always, ", ") + ")" +
		" OR " + j + ".state IN (" + strings.Join(retrying, ", ") + ") AND " + l + ".hold_retrying" +
		" OR " + j + ".state IN (" + strings.Join(discarded, ", ") + ") AND " + l + ".hold_discarded)"
}

// openSQL says that the slot s (an alias) may be granted now as far as
// its partition's backoff goes: no handler reported the partition's
// provider rate-limited (JobRateLimited, the backoff transition) with a
// Retry-After still to come. Every slot row of a partition carries the
// backoff (migration 00025), so each grant reads it from the slot rows it
// reads anyway: a partition with no backoff costs a grant one comparison
// a slot.
func openSQL(s string) string {
	return "(" + s + ".backoff_until IS NULL OR " + s + ".backoff_until <= now())"
}

// readySQL is the state a job takes when it may run again at once
// (queue.Ready), given the name of the limit that governs it (an SQL
// expression, NULL for none): available, or limited where a limit
// governs it, so that it starts again only through a grant. A job that
// enters limited gives up its slot (limit_slot = NULL): a limited job
// holds none.
func readySQL(limitName string) string {
	return "CASE WHEN " + limitName + " IS NULL THEN 'available' ELSE 'limited' END"
}

// deadlineStatesSQL lists the states whose jobs the deadline sweep
// discards once their deadline has passed (queue.StateRule.Deadline), as
// the predicate of the partial index the sweep reads,
// jobfence_jobs_deadline_waiting (migration 00023), does: a statement's
// list must imply it for the planner to use the index
// (TestDeadlineSweepReadsItsIndex).
func deadlineStatesSQL() string {
	var s []string
	for _, r := range queue.StateRules() {
		if r.Deadline {
			s = append(s, "'"+string(r.State)+"'")
		}
	}
	return "(" + strings.Join(s, ", ") + ")"
}

// finalStatesSQL lists the final states (queue.State.Final), in which a
// job has ended and a task has released or cancelled its dependents.
var finalStatesSQL = func() string {
	var s []string
	for _, st := range queue.States() {
		if st.Final() {
			s = append(s, "'"+string(st)+"'")
		}
	}
	return "(" + strings.Join(s, ", ") + ")"
}()

// sequenceSQL says that the limit row l (an alias) is a sequence's:
// Concurrency 1, holding its slot through retries, so that its jobs run
// one at a time in insert order (NULL where l has no concurrency cap). A
// fair limit's (FairBy) is none: its grants go round-robin across its keys
// (fairWaitingSQL).
func sequenceSQL(l string) string {
	return l + ".concurrency = 1 AND " + l + ".hold_retrying AND " + l + ".fair_by = ''"
}

// lateSet discards a job not started by its deadline.
const lateSet = `state = 'discarded', finalized_at = now(),
        errors = j.errors || jsonb_build_array(jsonb_build_object('attempt', j.attempt, 'at', now(), 'error',
            'jobfence: job deadline passed: not started by ' || (to_jsonb(j.deadline) #>> '{}') || '; discarded'))`

// finishLate says, in finishSQL, that an outcome would make its job ready
// again after its deadline: a snooze, or a retry with attempts left.
var finishLate = lateAgainSQL("f.outcome = 4 OR f.outcome = 2 AND j.attempt < j.max_attempts", "f.delay")

// lateAgainSQL says that job j, leaving running to run again (where again
// holds) after delay microseconds, would be ready only after its
// deadline: finishSQL and rescueSQL then discard it instead, the
// database's clock having the say, so that a worker whose clock runs slow
// cannot schedule an attempt past the deadline.
func lateAgainSQL(again, delay string) string {
	return `coalesce((` + again + `)
        AND j.deadline < now() + ` + delay + ` * interval '1 microsecond', false)`
}

// lateAgainErrorSQL is the error such a discard appends to j's errors,
// after the attempt's own.
func lateAgainErrorSQL(delay string) string {
	return `jsonb_build_array(jsonb_build_object('attempt', j.attempt, 'at', now(), 'error',
                   'jobfence: job deadline passed: its next attempt would start at '
                   || (to_jsonb(now() + ` + delay + ` * interval '1 microsecond') #>> '{}')
                   || ', after its deadline ' || (to_jsonb(j.deadline) #>> '{}') || '; discarded'))`
}
