package model

import (
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// A queueSpec is one queue of the model's world, and the limit that
// governs it, if any. The world is fixed: every run starts with the same
// queues and limits, and the operations change them (SetLimit, DeleteLimit,
// pause), so that an operation list means the same on every replay.
type queueSpec struct {
	name  string
	limit *pgqueue.Limit
}

// Partitions per limited queue: few, so that jobs meet in them.
const partitions = 3

// Owners: the simulated workers that hold claims.
const owners = 4

// lease is every claim's lease: long, so that only the operations that
// run a lease out (opExpire) expire one, at a step the list names.
const lease = 30 * time.Second

// world is the model's queues. Their limits are chosen to reach the
// paths where features meet: a held slot through retries (hold), a held
// slot under a rate (holdrate), a sequence, a plain rate, partitions.
var world = []queueSpec{
	{name: "plain"},
	{name: "conc", limit: &pgqueue.Limit{Name: "conc", Queue: "conc", PartitionBy: []string{"p"}, Concurrency: 2}},
	{name: "hold", limit: &pgqueue.Limit{Name: "hold", Queue: "hold", PartitionBy: []string{"p"}, Concurrency: 2, OnFailure: pgqueue.FailureHold}},
	{name: "holdrate", limit: &pgqueue.Limit{Name: "holdrate", Queue: "holdrate", PartitionBy: []string{"p"}, Concurrency: 1,
		OnFailure: pgqueue.FailureHold, Rate: 1, Period: time.Second}},
	{name: "seq", limit: &pgqueue.Limit{Name: "seq", Queue: "seq", Sequence: true}},
	{name: "rate", limit: &pgqueue.Limit{Name: "rate", Queue: "rate", Rate: 3, Period: time.Second}},
	{name: "wf"},
	// fair: a limit shared by the partition keys' jobs round-robin
	// (FairBy), p0 twice a turn. After wf, so that the operation lists
	// written before it keep their queues.
	{name: "fair", limit: &pgqueue.Limit{Name: "fair", Queue: "fair", Concurrency: 2, FairBy: "p", FairWeights: map[string]int{"p0": 2}}},
}

// queueNames are world's queues by name, in world's order.
func queueNames() []string {
	var names []string
	for _, q := range world {
		names = append(names, q.name)
	}
	return names
}

// jobInfo is what the model knows of one job it inserted.
type jobInfo struct {
	id       int64
	queue    string
	limit    string // the limit that governed it when inserted; "" for none
	part     string
	deadline time.Time
	unique   string
	// workflow and task name a workflow task; deps are its dependencies'
	// IDs, runAnyway its TaskOpts.RunAnyway and runOnFailure its
	// TaskOpts.RunOnFailure.
	workflow     string
	task         string
	deps         []int64
	runAnyway    bool
	runOnFailure bool
	// revived marks a job that Retry or RetryForce brought back after it
	// ended: it lost its place in its sequence's insert order.
	revived bool
	// ends are the final states Retry or RetryForce brought the job back
	// from, each with the step of that retry: a dependent counts an end
	// that came after it was inserted (depReleases), and neither the
	// revival nor a later end takes that release back.
	ends []end
	// born is the step that inserted the job: for a task appended in a
	// caller's transaction, the step of that insert, whose snapshot
	// decides whether it counted a dependency's end at once.
	born int
	// retriedEarly marks a task that Retry or RetryForce reached before
	// its dependencies released it.
	retriedEarly bool
	// lastAttempt is the attempt its last claim returned, or -1 where
	// the next one cannot be told (after a rescue, which may give the
	// attempt back, or an operator's retry).
	lastAttempt int
	starts      int
	// waits counts the signal waits of the job that ended (took a signal
	// or timed out): the next wait is the job's waits+1-th.
	waits int
	// forced marks a job a RetryForce was sent for: brought back from
	// completed, it forgot its steps.
	forced bool
	// priority is the priority it was inserted with; aging
	// (pgqueue.Config.PriorityAging) only improves it.
	priority int
}

// end is a final state a job was brought back from, and the step that
// brought it back.
type end struct {
	step  int
	state string
}

// final reports whether st is a final state.
func final(st string) bool {
	return st == "completed" || st == "discarded" || st == "cancelled"
}

// owner is a simulated worker: the claims it holds, and its fault.
type owner struct {
	frozen bool
	claims []*queue.Job
}

// limitState is a limit as the model has set it.
type limitState struct {
	spec    pgqueue.Limit
	deleted bool
	// lowered marks a limit whose concurrency was lowered: jobs started
	// under the old value may run on above the new one, so only starts
	// are checked against it (SetLimit takes back the slots above it
	// that jobs had not started with), not the running count.
	lowered bool
}

// start is one start of a job as a claim returned it: the database's
// time of the claim (attempted_at), its fence and attempt, and its limit.
type start struct {
	id      int64
	at      time.Time
	fence   int64
	attempt int
	limit   string
	part    string
}

// wfInfo is a workflow the model inserted: its ID and its tasks by name.
type wfInfo struct {
	id    string
	tasks map[string]int64
	names []string
}

// Stats counts what a run drove, for the closing log line.
type Stats struct {
	Ops, Faults, Starts, Inserts, Debounced, StaleRefused, Tolerated, Drained, Skipped int
	// Suspended counts the waits that suspended their job; Signals the
	// signals sent; Batches the batches of outcomes reported in one
	// Finish (OpBatch).
	Suspended, Signals, Batches int
	// SkippedBy counts the skipped violations by rule, and SkippedFirst
	// is the first of each rule.
	SkippedBy    map[string]int
	SkippedFirst map[string]string
}

// Add adds o's counts to s.
func (s *Stats) Add(o Stats) {
	s.Ops += o.Ops
	s.Faults += o.Faults
	s.Starts += o.Starts
	s.Inserts += o.Inserts
	s.Debounced += o.Debounced
	s.StaleRefused += o.StaleRefused
	s.Tolerated += o.Tolerated
	s.Drained += o.Drained
	s.Skipped += o.Skipped
	s.Suspended += o.Suspended
	s.Signals += o.Signals
	s.Batches += o.Batches
	for k, n := range o.SkippedBy {
		if s.SkippedBy == nil {
			s.SkippedBy = map[string]int{}
		}
		s.SkippedBy[k] += n
	}
	for k, v := range o.SkippedFirst {
		if s.SkippedFirst == nil {
			s.SkippedFirst = map[string]string{}
		}
		if _, ok := s.SkippedFirst[k]; !ok {
			s.SkippedFirst[k] = v
		}
	}
}

// state is the reference model: plain data the runner keeps beside the
// database and checks it against.
type state struct {
	jobs    map[int64]*jobInfo
	order   []int64
	owners  [owners]*owner
	limits  map[string]*limitState
	starts  []start
	paused  map[string]bool
	wfs     []*wfInfo
	uniques map[string]int64
	// backoffs are the partitions rate-limited outcomes backed off
	// (partKey), until when at the earliest by the database's clock;
	// exempt are the jobs granted before a backoff began (see
	// backoffReport).
	backoffs map[string]time.Time
	exempt   map[int64]bool
	// fair is the fair rule's record (checkFair).
	fair fairState
	// abandoned are the claims of killed owners: nobody writes them; a
	// lease expiry and a rescue move their jobs on.
	abandoned []*queue.Job
	stats     Stats
}

func newState() *state {
	s := &state{jobs: map[int64]*jobInfo{}, limits: map[string]*limitState{}, paused: map[string]bool{}, uniques: map[string]int64{},
		backoffs: map[string]time.Time{}, exempt: map[int64]bool{}}
	for i := range s.owners {
		s.owners[i] = &owner{}
	}
	for _, q := range world {
		if q.limit != nil {
			s.limits[q.limit.Name] = &limitState{spec: *q.limit}
		}
	}
	return s
}

// add records an inserted job.
func (s *state) add(j *jobInfo) {
	j.lastAttempt = 0
	s.jobs[j.id] = j
	s.order = append(s.order, j.id)
	s.stats.Inserts++
}

// pickJob returns the model's job number pick (modulo), or nil; with
// tasks, among the workflow tasks only.
func (s *state) pickJob(pick int, tasks bool) *jobInfo {
	ids := s.order
	if tasks {
		ids = nil
		for _, id := range s.order {
			if s.jobs[id].workflow != "" {
				ids = append(ids, id)
			}
		}
	}
	if len(ids) == 0 {
		return nil
	}
	return s.jobs[ids[pick%len(ids)]]
}

// liveClaims are the claims of owners that are neither frozen nor killed,
// with their owners, in a stable order.
func (s *state) liveClaims() (claims []*queue.Job, by []int) {
	for i, o := range s.owners {
		if o.frozen {
			continue
		}
		for _, c := range o.claims {
			claims = append(claims, c)
			by = append(by, i)
		}
	}
	return claims, by
}

// drop removes claim c from owner o.
func (s *state) drop(o int, c *queue.Job) {
	cs := s.owners[o].claims
	for i, x := range cs {
		if x == c {
			s.owners[o].claims = append(cs[:i:i], cs[i+1:]...)
			return
		}
	}
}
