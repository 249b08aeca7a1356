package queue

import "time"

// Defaults applied to zero fields of EnqueueParams.
const (
	DefaultQueue       = "default"
	DefaultPriority    = 1
	DefaultMaxAttempts = 25
)

// The range of EnqueueParams.Priority: MinPriority runs first.
const (
	MinPriority = 1
	MaxPriority = 4
)

// EnqueueParams describes a job to insert.
type EnqueueParams struct {
	// Kind names the handler; required.
	Kind string
	// Args is the JSON-encoded arguments; nil means {}.
	Args []byte
	// Queue defaults to DefaultQueue.
	Queue string
	// Priority runs from 1 (first) to 4 (last); zero means DefaultPriority.
	Priority int
	// ScheduledAt delays the job until then; zero means now.
	ScheduledAt time.Time
	// MaxAttempts defaults to DefaultMaxAttempts.
	MaxAttempts int
	// UniqueKey, when set, makes the insert a no-op if a job with the same
	// key is still stored, whatever its state, until it is pruned;
	// EnqueueResult.Inserted then reports false. Cron fires use it (one job
	// per fire, ever). For a duplicate refused only while a job is
	// unfinished, use Unique.
	UniqueKey string
	// Unique, when set, makes the insert a no-op while a job with the same
	// computed key (kind and, as asked, args, queue, period) is in one of
	// its states, unfinished ones by default; see UniqueOpts. It cannot be
	// combined with UniqueKey.
	Unique *UniqueOpts
	// Metadata travels with the job and comes back as Job.Metadata: small
	// string pairs that are not arguments, such as the W3C traceparent of
	// the span that enqueued it. Nil means none.
	Metadata map[string]string
	// Timeout, when not zero, bounds each attempt of the job, overriding
	// its handler's (worker.HandlerOptions.Timeout) and the worker's
	// (worker.Config.JobTimeout); negative means no timeout.
	Timeout time.Duration
	// Deadline, when set, is when the job must have ended by (Asynq's
	// Deadline): a job not started by then is discarded, with
	// ErrDeadline's text as the reason, and never runs; a running
	// attempt's context ends at it (or at its timeout, whichever comes
	// first); and a retry or snooze that would start after it discards the
	// job instead. It must not be before ScheduledAt.
	Deadline time.Time
	// LimitKey, when set, is the job's partition of the limit that governs
	// its queue or kind (pgqueue's Limit), in place of the one its
	// Limit.PartitionBy fields make from the args: a sequence key, a
	// customer. It is ignored where no limit governs the job; a backend
	// without limits (kafkaqueue) refuses it.
	LimitKey string
	// DeleteOnComplete, when set, makes the job's fenced completion delete
	// it instead of keeping it finished for the retention: nothing of it
	// is kept, its output included, for users who keep nothing of a
	// finished job (River Pro's delete on completion). A job that must stay
	// stored when it completes keeps its row all the same: one with a
	// UniqueKey, or with Unique states that include completed (the key must
	// keep refusing duplicates), a workflow task (its dependents read its
	// output) and one a limit governs (its rate slot counts its start). A
	// failed, discarded or cancelled job is kept as usual. A backend that
	// keeps no finished jobs (kafkaqueue) ignores it.
	DeleteOnComplete bool
	// Tags label the job for people who look for it (`jobfence jobs list
	// --tag`, the dashboard's jobs page, pgqueue's ListParams.Tag): at
	// most MaxTags, each 1 to MaxTagLen characters of A-Z a-z 0-9 _ . : -
	// (see ValidateTags); a duplicate is stored once. Nil means none, and
	// costs the insert nothing. A backend that cannot store them
	// (kafkaqueue) refuses them, as do workflow tasks.
	Tags []string
	// Encrypt stores the job's args encrypted, under the current key of
	// the inserting client's key ring (pgqueue.Config.Encryption), and
	// makes the insert fail with ErrEncryptionKey when the client has no
	// ring. A typed insert sets it from the args type (EncryptedArgs); a
	// ring with Encryption.All encrypts every job whatever it says.
	Encrypt bool
}

// WithDefaults returns p with its zero fields set to the defaults.
func (p EnqueueParams) WithDefaults() EnqueueParams {
	if p.Queue == "" {
		p.Queue = DefaultQueue
	}
	if p.Priority == 0 {
		p.Priority = DefaultPriority
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.Args == nil {
		p.Args = []byte("{}")
	}
	return p
}

// Validate reports what is wrong with p, after defaults.
func (p EnqueueParams) Validate() error {
	switch {
	case p.Kind == "":
		return &InvalidParamsError{Field: "Kind", Reason: "is empty"}
	case p.Priority < MinPriority || p.Priority > MaxPriority:
		return &InvalidParamsError{Field: "Priority", Reason: "must be between 1 and 4"}
	case p.MaxAttempts < 1:
		return &InvalidParamsError{Field: "MaxAttempts", Reason: "must be at least 1"}
	case !p.Deadline.IsZero() && p.Deadline.Before(p.ScheduledAt):
		return &InvalidParamsError{Field: "Deadline", Reason: "is before ScheduledAt: the job could never start"}
	case p.Unique != nil && p.UniqueKey != "":
		return &InvalidParamsError{Field: "Unique", Reason: "cannot be combined with UniqueKey: set one"}
	case p.Unique != nil:
		if err := p.Unique.validate(); err != nil {
			return err
		}
	}
	if len(p.Tags) > 0 {
		return ValidateTags(p.Tags)
	}
	return nil
}

// EnqueueResult is the outcome of one insert.
type EnqueueResult struct {
	// ID is the inserted job, or the existing job that holds the unique key.
	ID int64
	// Inserted is false when a job with the same unique key already existed.
	Inserted bool
	// State is the job's state: the new job's, or, when Inserted is false,
	// the existing job's as the insert found it.
	State State
	// Debounced reports that the insert, with UniqueOpts.Debounce, moved
	// the existing job's scheduled time instead of inserting.
	Debounced bool
}
