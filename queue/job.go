package queue

import (
	"encoding/json"
	"strconv"
	"time"
)

// Job is one claimed job as a backend hands it to a worker.
type Job struct {
	// ID identifies the job within its backend.
	ID int64
	// Queue is the queue (or topic) the job was enqueued to.
	Queue string
	// Kind names the handler that runs the job.
	Kind string
	// EncodedArgs is the job's JSON-encoded arguments.
	EncodedArgs []byte
	// State is the job's state when it was read.
	State State
	// Priority orders ready jobs of a queue: 1 runs first, 4 last.
	Priority int
	// Attempt counts the attempts this job has spent, this one included: a
	// claim spends one, and a put-back that is not the job's fault (see
	// OutcomeSnooze) gives it back.
	Attempt int
	// MaxAttempts is how many attempts the job gets before it is discarded.
	MaxAttempts int
	// Fence is this claim's fence: every outcome reported for the claim must
	// carry it. It only grows from one claim of a job to the next.
	Fence int64
	// ScheduledAt is when the job became, or becomes, ready to run.
	ScheduledAt time.Time
	// CreatedAt is when the job was enqueued.
	CreatedAt time.Time
	// AttemptedAt is when this attempt was claimed.
	AttemptedAt time.Time
	// LeaseExpiresAt is when this claim's lease runs out unless extended.
	LeaseExpiresAt time.Time
	// UniqueKey is the key that made the job unique, if any.
	UniqueKey string
	// Errors holds the errors of earlier attempts, oldest first.
	Errors []AttemptError
	// AttemptedBy lists the workers that claimed the job, oldest first.
	AttemptedBy []string
	// Key, when set by the backend, is the job's idempotency key; see
	// IdempotencyKey. pgqueue sets "jobfence-<uuid>", a random UUID drawn
	// when the job was inserted; kafkaqueue "kafka:<topic>:<partition>:
	// <offset>" of the job's first message.
	Key string
	// Timeout is the job's EnqueueParams.Timeout: zero when it has none.
	Timeout time.Duration
	// Deadline is the job's EnqueueParams.Deadline: zero when it has none.
	Deadline time.Time
	// Metadata is the job's EnqueueParams.Metadata, merged with what an
	// InsertHook added; nil when there is none. Treat it as read-only.
	Metadata map[string]string
	// Output is what the handler of the job's accepted completion
	// recorded (worker.RecordOutput), as JSON; nil when it recorded
	// nothing or the job has not completed.
	Output json.RawMessage
	// Progress is the last progress its handler reported
	// (worker.Progress) and the backend stored, as JSON, while the job ran
	// or at the end of that attempt; it stays after the job ends. Nil when
	// none was stored, and for a claimed job: only reads (pgqueue's Get)
	// fill it.
	Progress json.RawMessage
	// Logs are the records its handlers wrote through worker.Logger,
	// one entry per attempt that stored some (at most the last few
	// attempts': see worker.LogsConfig), oldest first. Nil when none was
	// stored, and for a claimed job: only reads (pgqueue's Get) fill it.
	Logs []AttemptLogs
	// WorkflowID names the workflow the job is a task of (package
	// workflow); empty for a job outside a workflow.
	WorkflowID string
	// TaskName is the job's name within its workflow.
	TaskName string
	// DependsOn are the IDs of the workflow tasks this one depends on.
	DependsOn []int64
	// Dependents is how many workflow tasks depend on this one, as read.
	// A worker passes it back in the job's Finish (Finish.Dependents).
	Dependents int
	// DependencyTraces are, for a claimed workflow task, the W3C
	// traceparents of the attempts that completed its dependencies (those
	// that stored one: see Finish.Trace), at most MaxDependencyTraces, in
	// the dependencies' ID order. Telemetry links the task's attempt span
	// to each.
	DependencyTraces []string
	// Limit names the limit that governs the job (pgqueue's Limit), and
	// LimitPartition its partition of that limit; both are empty for a job
	// no limit governs. A worker passes them back in the job's Finish.
	Limit          string
	LimitPartition string
	// Tags are the job's EnqueueParams.Tags, nil when it has none. They
	// are read where people look for jobs (pgqueue's Get and List), not
	// by a claim: a handler that needs a value has it in its args.
	Tags []string
}

// IdempotencyKey returns a key that is the same for every attempt of the job
// and differs between jobs, also between jobs of different databases (a
// staging and a production database that share one payment provider
// account): pass it to external APIs (a payment provider's
// Idempotency-Key header) so a retried attempt cannot charge twice. It is
// Key; a job without one (inserted into PostgreSQL before migration
// 00010 added the keys) keeps the key its earlier attempts had,
// "jobfence-job-<id>", which is unique within its database only.
func (j *Job) IdempotencyKey() string {
	if j.Key != "" {
		return j.Key
	}
	return "jobfence-job-" + strconv.FormatInt(j.ID, 10)
}

// Lease names one claim of a job: the job and the fence it was claimed with.
type Lease struct {
	ID    int64
	Fence int64
}

// Lease returns the job's current claim.
func (j *Job) Lease() Lease { return Lease{ID: j.ID, Fence: j.Fence} }

// AttemptError records why an attempt failed.
type AttemptError struct {
	// Attempt is the attempt that failed.
	Attempt int `json:"attempt"`
	// At is when it failed.
	At time.Time `json:"at"`
	// Error is the error's text.
	Error string `json:"error"`
	// Trace is the stack of a recovered panic.
	Trace string `json:"trace,omitempty"`
	// PutBack marks an error that did not spend the attempt: the job was
	// put back because of something that was not its failure (an unknown
	// kind, a broken connection, a database restart, a stopping worker).
	PutBack bool `json:"put_back,omitempty"`
	// PutBacks counts, on the put-back of a job whose handler ran (its
	// connection lost to an outage, its worker stopped under it), the
	// put-backs in a row up to this one; on the attempt spent because it
	// reached PutBackLimit, that count. Zero on other errors and on
	// put-backs of a job that did not run (an unknown kind), which neither
	// count nor break a run.
	PutBacks int `json:"put_backs,omitempty"`
}

// PutBackLimit bounds the put-backs in a row of a job whose handler ran:
// the PutBackLimit-th spends the attempt after all. A put-back gives the
// attempt back because its cause was not the job's; but a job that keeps
// ending that way (one that makes its worker restart, or whose own failure
// looks like an outage) would otherwise run, and repeat any outside effect
// it has, for ever without running out of attempts.
const PutBackLimit = 3

// PutBacksInARow is how many put-backs in a row errs (a job's errors,
// oldest first) end with: the PutBacks of the last error that has one, if
// no spent attempt came after it. Put-backs that carry no count (of a job
// that did not run) are passed over.
func PutBacksInARow(errs []AttemptError) int {
	for i := len(errs) - 1; i >= 0; i-- {
		switch e := errs[i]; {
		case !e.PutBack:
			return 0
		case e.PutBacks > 0:
			return e.PutBacks
		}
	}
	return 0
}

// MaxDependencyTraces caps Job.DependencyTraces: OpenTelemetry's default
// limit of links on a span. A fan-in's span links to its first
// dependencies' runs, and names them all (jobfence.workflow.depends_on).
const MaxDependencyTraces = 128

// AttemptLogs are the log records one attempt's handler wrote through
// worker.Logger, stored with the attempt (LogRecorder).
type AttemptLogs struct {
	// Attempt is the attempt that wrote them (Job.Attempt then). A
	// put-back that gave the attempt back runs it again under the same
	// number and a new fence: each run has its own entry.
	Attempt int `json:"attempt"`
	// Fence is the fence of the claim that wrote them.
	Fence int64 `json:"fence"`
	// At is when they were stored: at the end of the attempt, before its
	// outcome.
	At time.Time `json:"at"`
	// Records are the records kept, oldest first: the latest ones within
	// the attempt's bounds.
	Records []LogRecord `json:"records"`
	// Dropped counts the attempt's records that were not kept, the
	// earliest ones, past its bounds (worker.LogsConfig).
	Dropped int `json:"dropped,omitempty"`
	// Pruned counts the job's earlier attempts whose logs were deleted
	// to keep only the last few attempts' (worker.LogsConfig.Attempts);
	// set on the latest entry.
	Pruned int `json:"pruned,omitempty"`
}

// LogRecord is one stored log record.
type LogRecord struct {
	// At is the record's time.
	At time.Time `json:"at"`
	// Level is its level as slog names it: DEBUG, INFO, WARN, ERROR
	// (with an offset: INFO+2).
	Level string `json:"level"`
	// Message is its message.
	Message string `json:"msg"`
	// Attrs are its attributes, and those of the logger it was written
	// through, as key=value pairs separated by spaces (slog's text form,
	// groups as dotted keys).
	Attrs string `json:"attrs,omitempty"`
}

// Size is what the record counts towards its attempt's byte bound
// (worker.LogsConfig.MaxBytes): its message and attributes.
func (r LogRecord) Size() int { return len(r.Message) + len(r.Attrs) }
