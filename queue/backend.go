package queue

import (
	"context"
	"errors"
	"time"
)

// ClaimParams asks a backend for jobs.
type ClaimParams struct {
	// Queue is the queue to claim from.
	Queue string
	// Limit caps how many jobs one claim returns.
	Limit int
	// Lease is how long the claim holds unless extended by Heartbeat.
	Lease time.Duration
	// WorkerID names the claimer in the job's AttemptedBy.
	WorkerID string
	// DependencyTraces asks for the Job.DependencyTraces of the workflow
	// tasks claimed, which cost a read of their dependencies' rows. The
	// worker asks when its Hooks.TaskTrace is set, as telemetry's is;
	// without it they are nil.
	DependencyTraces bool
}

// Backend is what a worker needs from a queue. Implementations must be safe
// for concurrent use.
type Backend interface {
	// Claim hands up to p.Limit ready jobs of p.Queue to the caller, each
	// under a new fence, and returns at once (possibly with none).
	Claim(ctx context.Context, p ClaimParams) ([]*Job, error)
	// Finish applies outcomes, each only if its job is still running under
	// its fence. It returns the leases that were stale (and so changed
	// nothing); err reports a failure to apply the batch at all.
	Finish(ctx context.Context, fs []Finish) (stale []Lease, err error)
	// Heartbeat extends the leases of running jobs by d and returns the
	// leases that are lost: the job was rescued, re-claimed or cancelled. A
	// worker cancels the handlers of lost jobs at once.
	Heartbeat(ctx context.Context, leases []Lease, d time.Duration) (lost []Lease, err error)
}

// Waker is implemented by backends that can tell a worker that new jobs may
// be ready, so it need not poll.
type Waker interface {
	// Wake returns a channel that receives a value when jobs may have become
	// ready on queue. The channel is valid until ctx ends.
	Wake(ctx context.Context, queue string) (<-chan struct{}, error)
}

// Maintainer is implemented by backends that need periodic upkeep. Any
// number of instances may run it at once; each call does a bounded amount of
// work and reports how much.
type Maintainer interface {
	// Rescue returns up to p.Limit running jobs whose lease expired to
	// retryable, after p.Backoff, or discards those out of attempts. A
	// backend that can tell that its own outage ended the attempt (the
	// database restarted while the job ran) gives the attempt back, and
	// records the put-back on the job, unless it would be the
	// PutBackLimit-th in a row (see AttemptError.PutBacks).
	Rescue(ctx context.Context, p RescueParams) (int, error)
	// Prune deletes final jobs finalized more than retention ago.
	Prune(ctx context.Context, retention time.Duration, limit int) (int, error)
}

// SessionReaper is implemented by backends whose database can be left
// holding a transaction open by a client that stopped in the middle of
// sending a statement or a batch of them (frozen by SIGSTOP or a paused
// VM, or cut off): the server then waits for the rest with the
// transaction's locks held, and no idle bound of the server's ends it.
// Every worker calls it at each rescue (worker.Config.RescueInterval);
// any number of instances may run it at once.
type SessionReaper interface {
	// EndStalledSessions ends the sessions that have waited for their
	// client, mid-statement or mid-batch and holding locks on the queue's
	// tables, for longer than the backend's bound, and returns how many it
	// ended.
	EndStalledSessions(ctx context.Context) (int, error)
}

// DependentReleaser is implemented by backends whose completion of a
// workflow task with many dependents releases the first of them in its
// own transaction and leaves the rest to be released after its commit
// (pgqueue: in ranges of 1,000). Every worker calls it with nil at each
// rescue (worker.Config.RescueInterval), for what a client that stopped
// first left, and with the task's ID after a transactional handler's
// commit; any number of instances may call it at once.
type DependentReleaser interface {
	// ReleaseDependents releases the dependents left to release of the
	// completed tasks ids, or of any task when ids is nil, and returns
	// how many ranges of them it released.
	ReleaseDependents(ctx context.Context, ids []int64) (int, error)
}

// ReleaseWaiter is implemented by backends that release a completed
// workflow task's dependents in the background after its completion's
// commit (see DependentReleaser), or wake other processes' workers of the
// jobs that outcomes made ready in the background. A stopping worker
// calls it once its last outcomes are recorded, so that the releases and
// wake-ups they started are done before Stop returns: a release cut short
// (its caller closes the pool next) would wait for another instance's
// maintenance, a wake-up for the workers' poll.
type ReleaseWaiter interface {
	// WaitReleases waits until the background releases running when it
	// is called, and the wake-ups in flight, have ended, or ctx ends
	// (then it returns ctx's error and they go on).
	WaitReleases(ctx context.Context) error
}

// FinishedMaintainer is implemented by backends that keep finished jobs
// in time partitions, dropped whole once older than the retention, rather
// than deleting them row by row (pgqueue: jobfence_jobs_finished). Every
// worker calls it with its Prune (worker.Config.PruneInterval); any number
// of instances may run it at once, and each call waits a bounded time for
// each lock it needs.
type FinishedMaintainer interface {
	// MaintainFinished creates the partitions that finished jobs will go
	// to, ahead of time, and drops those whose every job finished more
	// than retention ago. A retention shorter than MinFinishedRetention is
	// an error wrapping ErrRetentionTooShort: finished jobs then stay
	// where Prune deletes them.
	MaintainFinished(ctx context.Context, retention time.Duration) (FinishedMaintenance, error)
}

// MinFinishedRetention is the shortest retention that finished jobs are
// kept for in partitions (FinishedMaintainer): each partition spans a
// sixth of the retention, and a partition shorter than a minute would be
// DDL at every pass.
const MinFinishedRetention = time.Minute

// ErrRetentionTooShort reports a retention below MinFinishedRetention.
var ErrRetentionTooShort = errors.New("jobfence: retention too short for finished-job partitions")

// FinishedMaintenance is what a MaintainFinished call did and found.
type FinishedMaintenance struct {
	// Created and Dropped count the partitions it created and dropped.
	Created, Dropped int
	// Partitions is how many partitions hold finished jobs now.
	Partitions int
	// Until is when the partitions made ahead run out: a completion after
	// it keeps its job in the jobs table (where Prune deletes it) until
	// maintenance runs again.
	Until time.Time
}

// Promoter is implemented by backends whose claims read only jobs marked
// available, so that jobs waiting for a time of their own (scheduled,
// retrying after a backoff, snoozed) cost a claim nothing: something must
// mark them available once their time has come. Every worker runs it
// periodically (worker.Config.PromoteInterval) and before RunOne's claim;
// any number of instances may run it at once.
type Promoter interface {
	// Promote makes up to limit jobs whose time has come available, wakes
	// the workers of their queues, and returns how many it made available
	// per queue. A backend that stores deadlines (EnqueueParams.Deadline)
	// also discards, uncounted, up to limit jobs not started by theirs.
	Promote(ctx context.Context, limit int) (map[string]int, error)
}

// Granter is implemented by backends with flow control (pgqueue's limits):
// a job a limit holds back waits for a slot, and something must hand out
// the slots that free without an outcome to hand them on (a rescued job's,
// a raised limit's, a rate's period passing). Every worker runs it with
// its promoter; any number of instances may run it at once.
type Granter interface {
	// GrantWaiting hands free slots to waiting jobs in up to limit
	// partitions and returns how many jobs it made available per queue.
	GrantWaiting(ctx context.Context, limit int) (map[string]int, error)
}

// RefillGranter is a Granter that learns, from its grants, when a rate
// limit's window next frees a slot that a waiting job wants, so that a
// worker grants it then rather than at its next grant pass.
type RefillGranter interface {
	Granter
	// GrantRefilled grants in the partitions whose rate slots have freed
	// by now, and returns the jobs it made available per queue and when
	// the next known rate slot frees (zero: none known).
	GrantRefilled(ctx context.Context) (map[string]int, time.Time, error)
	// Refills holds a value when a grant learns of a rate slot that frees
	// before the earliest one known.
	Refills() <-chan struct{}
}

// FinishClaimer is a Backend that can hand the limit slots an outcome
// frees straight to the worker that sent it: in the outcomes' round trip,
// the jobs granted those slots are claimed for the caller (running,
// fenced, leased, their attempt counted as a claim counts it) instead of
// being made available for any claim. A worker detects it by assertion
// and marks, with Finish.ClaimNext, the outcomes whose next job it has
// room for; backends without it (Kafka) are unaffected.
type FinishClaimer interface {
	// FinishClaim applies fs as Backend.Finish does, and returns the
	// stale leases and the jobs it claimed: at most one for each Finish
	// with ClaimNext set, only into a slot that Finish's applied outcome
	// freed, never from a paused queue.
	FinishClaim(ctx context.Context, fs []Finish, p FinishClaimParams) (stale []Lease, claimed []*Job, err error)
}

// FinishClaimParams says how FinishClaim claims: as ClaimParams does.
type FinishClaimParams struct {
	// Lease is the claimed jobs' lease.
	Lease time.Duration
	// WorkerID is recorded on the claimed jobs (Job.AttemptedBy).
	WorkerID string
	// Slots, if not nil, lets the backend claim for the caller the
	// dependents that the workflow tasks completed by fs make ready, as
	// it releases them: those it releases in the outcomes' round trip and
	// those it releases after (a fan-out's rest), into slots it reserves
	// first and fills once each release has committed. Nil: dependents are
	// made available for any claim.
	Slots Slots
	// DependencyTraces asks, as ClaimParams.DependencyTraces does, for
	// the Job.DependencyTraces of the dependents claimed into Slots.
	DependencyTraces bool
}

// Slots is a worker's room to run more jobs, which a FinishClaimer fills
// with jobs it claims for the worker outside the worker's own claims
// (FinishClaimParams.Slots). Every Reserve that returns n > 0 is followed
// by exactly one Fill of the same queue and n, whatever the claim's fate,
// so that no reserved slot stays taken.
type Slots interface {
	// Reserve reserves up to n slots of queue q for jobs about to be
	// claimed, and returns how many it reserved: 0 when none is free, the
	// queue is paused or not run here, or the worker is stopping.
	Reserve(q string, n int) int
	// Fill hands the jobs claimed into n slots of queue q that Reserve
	// reserved to the runners, their leases held until until by the
	// worker's clock, and frees the slots they did not fill.
	Fill(q string, n int, jobs []*Job, until time.Time)
}

// RescueParams tunes one Rescue call.
type RescueParams struct {
	// Limit caps how many jobs one call rescues.
	Limit int
	// Backoff returns how long a rescued job, whose attempt Attempt was
	// spent, waits before it runs again; nil means no wait.
	Backoff func(job *Job) time.Duration
}

// Canceller is implemented by backends that can tell a worker, as it
// happens, that a running job was cancelled elsewhere.
type Canceller interface {
	// Cancelled returns a channel of the leases of jobs cancelled while
	// running. A lease names the claim that was cancelled: a notification
	// that arrives after the job was retried and claimed again carries the
	// old fence, and a worker ignores it for the new claim.
	Cancelled(ctx context.Context) (<-chan Lease, error)
}

// ProgressRecorder is implemented by backends that store a running job's
// progress (worker.Progress) apart from its outcome, so that readers see
// it while the job runs.
type ProgressRecorder interface {
	// RecordProgress stores progress (JSON) as the progress of the job l
	// names, only while it is running under l's fence, replacing what was
	// stored. It returns a *StaleFenceError (errors.Is ErrStaleFence) and
	// changes nothing when the job is no longer running under that fence.
	RecordProgress(ctx context.Context, l Lease, progress []byte) error
}

// LogRecorder is implemented by backends that store the log records an
// attempt's handler wrote (worker.Logger) with the attempt.
type LogRecorder interface {
	// RecordLogs stores each write's logs as the logs of the attempt its
	// lease names, only while that job is running under the lease's
	// fence, and deletes the job's logs of earlier attempts past the keep
	// latest (this one included), counting them in the stored
	// AttemptLogs.Pruned. It returns the leases of the writes it refused
	// because their job is no longer running under their fence: a stale
	// attempt's logs never replace or join those of the attempt that holds
	// the job. A backend may store nothing, and report nothing stale, for
	// a job whose record goes when it completes
	// (EnqueueParams.DeleteOnComplete).
	RecordLogs(ctx context.Context, writes []LogsWrite, keep int) (stale []Lease, err error)
}

// LogsWrite is one attempt's logs for LogRecorder.RecordLogs: the lease
// of the attempt and what it logged (its At and Pruned are the
// backend's to set).
type LogsWrite struct {
	Lease Lease
	Logs  AttemptLogs
}

// ErrNotSetUp reports a backend that cannot run jobs until someone sets it
// up: for PostgreSQL, jobfence's tables are missing (run `jobfence migrate
// up`). Waiting does not help, unlike with an unreachable server.
var ErrNotSetUp = errors.New("jobfence: the backend is not set up")

// Checker is implemented by backends that can tell, before a worker starts,
// whether they can run jobs at all. A worker's Start calls it so that a
// missing setup fails at once instead of as a claim error retried forever.
type Checker interface {
	// Check returns an error wrapping ErrNotSetUp, and naming what to do,
	// when the backend is not set up; any other error means it could not
	// tell (for example the server is unreachable), which a caller may
	// retry.
	Check(ctx context.Context) error
}
