// Package model is jobfence's model-based test: a reference model of the
// job state machine in plain Go data (jobs, limits with their partitions,
// sequences and rates, workflow edges, the owners' claims and fences,
// deadlines), a generator of random operations and faults from a seed, a
// runner that drives queue/pgqueue through its public API side by side
// with the model, the invariants checked after every step, and a shrinker
// that cuts a failing operation list down to a short one.
//
// The promises it checks are those users choose jobfence for: a limit is
// never exceeded, a sequence runs in insert order one at a time, a rate is
// never overrun, a workflow dependent runs after its dependencies and once
// per release, a deadline is honoured, no stale owner's write lands, and
// every job ends once the faults stop. Each one is checked where features
// meet other lifecycle paths (put-backs, snoozes, retries, rescues,
// limit changes, appends), which hand-written tests cover pair by pair.
//
// A violation names its rule: concurrency, lowered limit (a start above a
// lowered limit that had not granted the job before), held slot (a start
// beside a job of a FailureHold limit or a sequence that waits to run
// again and keeps its slot), rate, backoff (a start in a partition
// before the end of the backoff a provider's 429 asked for), fair (a fair
// limit's key with a waiting job passed over by more grants to the other
// keys than one turn of their weights), aging (a priority that aging made
// worse than the job's, or better than the first), sequence, workflow, workflow retry
// before dependencies, deadline (a job still waiting past its deadline
// after the promoter's sweep), stale write, fence (a current claim's
// write refused), unique, attempts, bounded wait (a call that waited
// opTimeout on another session), drain (a job that never ended once the
// faults stopped), and error (a server error).
//
// See docs/testing.md for how to run it and replay a failure.
package model
