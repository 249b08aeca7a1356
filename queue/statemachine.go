package queue

// The job's state machine, written once: what each state holds
// (StateRules) and every way a job moves between states (Transitions).
// The PostgreSQL backend builds the rules its statements share from this
// table (pgqueue's holdingSQL, readySQL and deadline sweep), a test checks
// that every statement that moves a job names a row of it, and
// docs/states.md is rendered from it (StatesMarkdown), so that code, docs
// and tests cannot disagree about what a state holds.

// Hold says when a state keeps the concurrency slot of a limit (a
// sequence's turn is its one slot) that its job was granted.
type Hold uint8

// The ways a state can keep a slot.
const (
	// HoldNever: a job in the state holds no slot; its slot, if it names
	// one, is free.
	HoldNever Hold = iota
	// HoldAlways: the job holds its slot whatever its limit's options.
	HoldAlways
	// HoldIfRetrying: the job holds its slot when its limit holds slots
	// through retries (a FailureHold limit, a sequence), so that no job
	// of its partition overtakes it while it waits to run again.
	HoldIfRetrying
	// HoldIfDiscarded: the job holds its slot when its limit holds slots
	// through discards (a sequence that halts on a discard).
	HoldIfDiscarded
)

// String names h as docs/states.md does.
func (h Hold) String() string {
	switch h {
	case HoldAlways:
		return "yes"
	case HoldIfRetrying:
		return "if the limit holds through retries"
	case HoldIfDiscarded:
		return "if the limit holds through discards"
	}
	return "no"
}

// StateRule says what a job in State holds and which sweeps look at it.
type StateRule struct {
	State State
	// Slot: whether the state keeps the concurrency slot the job was
	// granted (Hold).
	Slot Hold
	// RateSlot: the job holds a rate slot granted to it and not yet used
	// by a start (granted, not yet claimed). A rate slot counts the
	// job's start and is free a period after that start, whatever the
	// state then.
	RateSlot bool
	// Lease: the job runs under a lease and a fence; only its fence's
	// holder may end it, and a rescue ends it once the lease runs out.
	Lease bool
	// Claimable: a claim may take the job (its scheduled time come).
	Claimable bool
	// Deadline: the deadline sweep discards the job once its deadline has
	// passed: every state in which it waits to start.
	Deadline bool
	// DependentsWait: a workflow task in this state waits for its
	// dependencies; each releases it once, when it ends in a state that
	// releases dependents (ReleasesDependents). A task that runs only on
	// a failure (RunOnFailure) waits for every dependency to end, and
	// holds whether one failed (dep_failed).
	DependentsWait bool
	// ReleasesDependents says what entering the state does to the job's
	// pending dependents: "release" (one dependency fewer), "cancel" (the
	// dependent is cancelled unless it runs anyway or only on a failure,
	// which count it as a release, a failed one), or "" (nothing).
	ReleasesDependents string
}

// StateRules returns the rule of every state, in States' order.
func StateRules() []StateRule {
	return []StateRule{
		{State: StateAvailable, Slot: HoldAlways, RateSlot: true, Claimable: true, Deadline: true},
		{State: StateScheduled, Slot: HoldIfRetrying, Deadline: true},
		{State: StateRunning, Slot: HoldAlways, Lease: true},
		{State: StateRetryable, Slot: HoldIfRetrying, Deadline: true},
		{State: StateCompleted, ReleasesDependents: "release"},
		{State: StateDiscarded, Slot: HoldIfDiscarded, ReleasesDependents: "cancel"},
		{State: StateCancelled, ReleasesDependents: "cancel"},
		{State: StateLimited, Deadline: true},
		{State: StatePending, Deadline: true, DependentsWait: true},
	}
}

// RuleOf returns s's rule (the zero rule, holding nothing, for a state
// that is not one of States).
func RuleOf(s State) StateRule {
	for _, r := range StateRules() {
		if r.State == s {
			return r
		}
	}
	return StateRule{State: s}
}

// Transition is one row of the state machine: an event that moves a job
// from one of From to one of To, and what the move keeps and frees. Sites
// names the statements that carry it out; each of them names the row
// (its Name) in a comment "transition: Name", which a test checks.
type Transition struct {
	Name  string
	Event string
	From  []State
	To    []State
	// Effect says what the move does to the slots, the rate, the
	// sequence's turn, the dependents and the attempt.
	Effect string
}

// Ready is where a job goes when it may run again at once (a put-back,
// a due retry or snooze, a rescue that gives the attempt back, a retry
// from the CLI): available if no limit governs it, else limited, its
// slot given up, so that it starts again only through a grant, which
// takes a concurrency slot below the current limit and a rate slot, and
// keeps a sequence's order. A restart that kept its slot instead would
// take no rate slot and ignore a lowered limit.
var Ready = []State{StateAvailable, StateLimited}

// Transitions returns every row of the state machine.
func Transitions() []Transition {
	waiting := []State{StateAvailable, StateScheduled, StateRetryable, StateLimited, StatePending}
	return []Transition{
		{Name: "insert", Event: "an insert (one, many, a workflow's tasks, a cron fire)",
			From: nil, To: []State{StateAvailable, StateScheduled, StateLimited, StatePending, StateCancelled},
			Effect: "scheduled if its time is to come, pending while a workflow task has dependencies left (cancelled if one already failed, or, for a RunOnFailure task, if all had completed), limited if a limit governs it, else available; no slot"},
		{Name: "debounce", Event: "an insert that debounces a waiting duplicate",
			From: []State{StateAvailable, StateScheduled, StateLimited}, To: []State{StateAvailable, StateScheduled, StateLimited},
			Effect: "takes the new time; keeps its slot (held as the new state says)"},
		{Name: "adopt", Event: "SetLimit on a queue with available jobs, or a due job of a queue that now has a limit",
			From: []State{StateAvailable}, To: []State{StateLimited},
			Effect: "comes under the limit, without a slot"},
		{Name: "lower", Event: "SetLimit lowers a limit's Concurrency or Rate",
			From: []State{StateAvailable}, To: []State{StateLimited},
			Effect: "in a partition whose slot holders outnumber the new Concurrency (or for a rate slot at or above the new Rate), a job granted a slot that has not started gives it up and waits for a grant again; running jobs above it finish"},
		{Name: "rekey", Event: "SetLimit gives a limit FairBy, or another FairBy field",
			From: []State{StateLimited}, To: []State{StateLimited},
			Effect: "takes the fair key the field gives it (its args' value), by which the grants of its partition take turns; keeps its age"},
		{Name: "grant", Event: "a slot frees (an outcome's hand-over, the grant after it, an insert's grant, the workers' grant pass)",
			From: []State{StateLimited}, To: []State{StateAvailable, StateRunning},
			Effect: "takes a free concurrency slot below the current limit, less the holders above a lowered one, and a rate slot, none while the partition backs off (a backoff's Retry-After not yet passed, by the database's clock); a sequence's oldest job or none; under a fair limit (FairBy) the partition's jobs in weighted round-robin across their fair keys, from where its last grant stopped (a key with waiting jobs is served within one turn of the others' weights), else its oldest; running when the hand-over claims it for the outcome's worker; a deleted limit's jobs go available without a slot; a job past its deadline is passed over, left to the deadline sweep"},
		{Name: "age", Event: "the promoter pass, with pgqueue.Config.PriorityAging set, finds a job that has waited available PriorityAging at its priority",
			From: []State{StateAvailable}, To: []State{StateAvailable},
			Effect: "its priority one level better (down to MinPriority) and its scheduled_at one PriorityAging later, so one level a PriorityAging waited; the oldest 32 of a queue and priority a pass; keeps its slot"},
		{Name: "claim", Event: "a worker's claim",
			From: []State{StateAvailable}, To: []State{StateRunning},
			Effect: "new fence, lease, attempt + 1; keeps its slot; a job past its deadline is discarded unrun instead"},
		{Name: "release-claim", Event: "a workflow task's last dependency completes in a batch that claims its dependents",
			From: []State{StatePending}, To: []State{StateRunning},
			Effect: "as claim, for a task no limit governs"},
		{Name: "heartbeat", Event: "the worker extends the lease",
			From: []State{StateRunning}, To: []State{StateRunning},
			Effect: "lease extended under the fence; zero rows: the worker lost the job"},
		{Name: "progress", Event: "the handler reports progress (worker.Progress)",
			From: []State{StateRunning}, To: []State{StateRunning},
			Effect: "progress stored under the fence; zero rows: the attempt lost the job, and its progress changes nothing"},
		{Name: "complete", Event: "the handler returns nil",
			From: []State{StateRunning}, To: []State{StateCompleted},
			Effect: "frees the slot; releases each dependent once"},
		{Name: "retry", Event: "the handler fails with attempts left",
			From: []State{StateRunning}, To: []State{StateRetryable, StateDiscarded},
			Effect: "keeps the slot if the limit holds through retries; discarded when out of attempts or the retry would start past the deadline"},
		{Name: "discard", Event: "the handler cancels the job or runs out of attempts",
			From: []State{StateRunning}, To: []State{StateDiscarded},
			Effect: "keeps the slot if the limit holds through discards (a sequence halts), else frees it; cancels dependents (run-anyway ones count it as released)"},
		{Name: "snooze", Event: "JobSnooze, an unknown kind's put-back, a transactional handler's outage put-back, a stopping worker's put-back",
			From: []State{StateRunning}, To: []State{StateScheduled, StateAvailable, StateLimited, StateDiscarded},
			Effect: "gives the attempt back; with a delay scheduled, keeping the slot if the limit holds through retries; without one Ready; discarded if it would start past the deadline"},
		{Name: "backoff", Event: "JobRateLimited: the handler reports its provider's rate limit (a 429 and its Retry-After)",
			From: []State{StateRunning}, To: []State{StateScheduled, StateAvailable, StateLimited, StateDiscarded},
			Effect: "as snooze for the Retry-After (the attempt given back; the slot kept while scheduled only if the limit holds through retries); and the job's limit partition backs off until then: no grant hands it a slot, a later backoff extends it and an earlier one leaves it; other partitions, and a job no limit governs, are unaffected"},
		{Name: "step", Event: "a durable step's output, or a sleep's or signal wait's timer, is recorded (jobfence.Step, Sleep, AwaitSignal)",
			From: []State{StateRunning}, To: []State{StateRunning},
			Effect: "recorded once per job and step name, under the fence (the job's row share-locked for the statement, or, in a transactional handler, with the fenced completion that commits it): a stale attempt records nothing; a later attempt replays the recorded output instead of running the step"},
		{Name: "suspend", Event: "the handler sleeps (jobfence.Sleep) or waits for a signal (AwaitSignal) that has not arrived",
			From: []State{StateRunning}, To: []State{StateScheduled, StateAvailable, StateLimited, StateDiscarded},
			Effect: "as snooze: the attempt given back, scheduled until the timer, keeping the slot only if the limit holds through retries (a sequence keeps its turn), a signal wait recording the name it awaits; Ready at once if that signal is already there; discarded if it would wake past the deadline; its recorded steps are kept"},
		{Name: "signal", Event: "a signal arrives for the name a scheduled job awaits (Client.Signal's promote, or the promoter's sweep; a child workflow's end is the signal its parent's AwaitChild awaits, stored by that sweep)",
			From: []State{StateScheduled}, To: Ready,
			Effect: "as promote, before the timer: Ready; the wait takes the signal, oldest first, when the job runs again; a signal that no wait awaits yet is kept for the next"},
		{Name: "cancel", Event: "Cancel of a running job (by its worker under its fence, or an admin cancel)",
			From: []State{StateRunning}, To: []State{StateCancelled},
			Effect: "frees the slot; cancels dependents (run-anyway ones count it as released); an admin cancel also cancels the child workflows the job started (workflow.StartChild), every task of theirs not ended, running ones through their workers, and theirs in turn, in its transaction"},
		{Name: "rescue", Event: "a lease ran out (the worker crashed, froze or was cut off)",
			From: []State{StateRunning}, To: []State{StateRetryable, StateDiscarded, StateAvailable, StateLimited},
			Effect: "the attempt spent: retryable as a retry (keeping the slot if held through retries) or discarded; claimed before the server restarted: the attempt given back, Ready"},
		{Name: "promote", Event: "the promoter finds the job's time come",
			From: []State{StateScheduled, StateRetryable}, To: Ready,
			Effect: "Ready: a job under a limit gives its slot up and waits for a grant (a new rate slot, the current limit, its sequence's order)"},
		{Name: "deadline", Event: "the promoter's sweep finds the deadline passed before the job started",
			From: waiting, To: []State{StateDiscarded},
			Effect: "discarded with the reason; a waiting job holds no slot a start needs; a task's dependents are cancelled or run anyway"},
		{Name: "release", Event: "a workflow task's dependency ends (in the same transaction; for a task appended to a running workflow, at the promoter's next sweep of its edge; for the dependents of a RunOnFailure task cancelled by a completion's release, right after that commit, or at a worker's maintenance)",
			From: []State{StatePending}, To: []State{StatePending, StateAvailable, StateScheduled, StateLimited, StateCancelled},
			Effect: "one dependency fewer per dependency, once (a dependency's next end after a retry releases only the dependents added since); at zero Ready (or scheduled); cancelled if the dependency failed and it does not run anyway or only on a failure; a RunOnFailure task records a failed dependency, and at zero is Ready if one failed, else cancelled (no dependency failed), its dependents then treated as that cancel implies"},
		{Name: "cancel-waiting", Event: "Cancel of a waiting job (admin, a workflow's cancel)",
			From: waiting, To: []State{StateCancelled},
			Effect: "frees the slot it held; cancels dependents; cancels the child workflows the job started (a parent suspended awaiting one), as cancel does"},
		{Name: "retry-final", Event: "Retry of a discarded, cancelled or waiting job, RetryForce of a completed one (admin)",
			From: []State{StateDiscarded, StateCancelled, StateCompleted, StateAvailable, StateScheduled, StateRetryable, StateLimited}, To: Ready,
			Effect: "Ready now, with an attempt more allowed; its slot given up; its dependents are not released again; a durable job resumes at its first unrecorded step, except a completed one (RetryForce), whose recorded steps are forgotten; a workflow task its dependencies have not released (pending, or cancelled before they did) is refused (ErrDependenciesPending): it would run before them"},
		{Name: "prune", Event: "retention passes",
			From: []State{StateCompleted, StateDiscarded, StateCancelled}, To: nil,
			Effect: "the row is deleted (or moved to the finished partitions)"},
	}
}
