package queue

import (
	"encoding/json"
	"fmt"
	"time"
)

// Args is implemented by a job's typed arguments: Kind names the handler
// that runs them, and the value itself is stored as JSON.
type Args interface {
	Kind() string
}

// InsertOpts are the optional settings of a typed insert; the zero value
// takes every default of EnqueueParams. Each field is that of
// EnqueueParams of the same name.
type InsertOpts struct {
	Queue       string
	Priority    int
	ScheduledAt time.Time
	MaxAttempts int
	UniqueKey   string
	// Unique, when set, makes jobfence refuse a duplicate of the job while
	// one is unfinished (or in the states it names); see UniqueOpts. It
	// cannot be combined with UniqueKey.
	Unique   *UniqueOpts
	Metadata map[string]string
	// Timeout bounds each attempt of the job; see EnqueueParams.Timeout.
	Timeout time.Duration
	// Deadline is when the job must have ended by; see
	// EnqueueParams.Deadline.
	Deadline time.Time
	// LimitKey is the job's partition of its limit; see
	// EnqueueParams.LimitKey.
	LimitKey string
	// DeleteOnComplete deletes the job when it completes; see
	// EnqueueParams.DeleteOnComplete. Set on the args type's InsertOpts,
	// it holds for every job of the kind (a call cannot turn it off).
	DeleteOnComplete bool
	// Tags label the job; see EnqueueParams.Tags. The call's, the type's
	// (InsertOptsProvider) and the args value's own (TagsProvider) are
	// merged, in that order, each tag once.
	Tags []string
}

// InsertOptsProvider is implemented by an args type that carries its own
// insert defaults, as River's JobArgsWithInsertOpts does: a queue,
// priority, attempt budget or timeout that every job of the kind shares
// is then said once, on the type, rather than at every insert and in
// every schedule. Params (and so every typed insert: pgqueue's Insert,
// InsertTx, kafkaqueue's Insert, the jobfence Client's Insert, InsertTx
// and InsertMany) calls InsertOpts on the args, by value, and the options
// given at the call override its fields one by one: a field set at the
// call wins, a zero one takes the type's. Metadata is merged key by key,
// the call's entries winning; UniqueKey and Unique are one setting, the
// type's taken only when the call sets neither. A schedule (scheduler's Add, AddArgs, Put,
// PutArgs) takes the type's Queue, Priority and MaxAttempts under its own
// Options, and a worker bounds the jobs of the kind inserted without a
// Timeout (a schedule's fires, untyped EnqueueParams) by the type's; a
// fire's time and unique key are the schedule's.
//
// InsertOpts is called at each insert: a Deadline it returns may be
// computed from time.Now() (an hour from the insert, say).
type InsertOptsProvider interface {
	InsertOpts() InsertOpts
}

// Merge returns o with each zero field taken from defaults, and its
// Metadata merged over the defaults' (o's entries win). UniqueKey and
// Unique count as one field: both are taken from defaults only when o
// sets neither.
func (o InsertOpts) Merge(defaults InsertOpts) InsertOpts {
	if o.Queue == "" {
		o.Queue = defaults.Queue
	}
	if o.Priority == 0 {
		o.Priority = defaults.Priority
	}
	if o.ScheduledAt.IsZero() {
		o.ScheduledAt = defaults.ScheduledAt
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = defaults.MaxAttempts
	}
	if o.UniqueKey == "" && o.Unique == nil {
		// Uniqueness is one setting: a UniqueKey or Unique given at the
		// call replaces the type's, whichever of the two that is.
		o.UniqueKey, o.Unique = defaults.UniqueKey, defaults.Unique
	}
	o.Metadata = MergeMetadata(o.Metadata, defaults.Metadata)
	if o.Timeout == 0 {
		o.Timeout = defaults.Timeout
	}
	if o.Deadline.IsZero() {
		o.Deadline = defaults.Deadline
	}
	if o.LimitKey == "" {
		o.LimitKey = defaults.LimitKey
	}
	o.DeleteOnComplete = o.DeleteOnComplete || defaults.DeleteOnComplete
	o.Tags = MergeTags(o.Tags, defaults.Tags)
	return o
}

// OptsOf returns the options of an insert of args with opts (which may be
// nil): opts over args' own defaults when args is an InsertOptsProvider,
// with the args' own tags merged last when args is a TagsProvider.
func OptsOf(args Args, opts *InsertOpts) InsertOpts {
	var o InsertOpts
	if opts != nil {
		o = *opts
	}
	if p, ok := args.(InsertOptsProvider); ok {
		o = o.Merge(p.InsertOpts())
	}
	if t, ok := args.(TagsProvider); ok {
		o.Tags = MergeTags(o.Tags, t.Tags())
	}
	return o
}

// Params encodes args as JSON and returns the EnqueueParams of a job of
// kind args.Kind() with opts applied (opts may be nil) over args' own
// defaults (see InsertOptsProvider), asking for encryption when args is
// an EncryptedArgs that says so. A Unique that asks ByArgs gets its
// ByFields from the args type's fields tagged unique:"true", if any; a
// ByFields entry that is no field of the type is an error.
func Params(args Args, opts *InsertOpts) (EnqueueParams, error) {
	b, err := json.Marshal(args)
	if err != nil {
		return EnqueueParams{}, fmt.Errorf("jobfence: encode args of kind %q: %w", args.Kind(), err)
	}
	o := OptsOf(args, opts)
	u, err := typedUnique(args, o.Unique)
	if err != nil {
		return EnqueueParams{}, err
	}
	return EnqueueParams{
		Kind: args.Kind(), Args: b,
		Queue: o.Queue, Priority: o.Priority, ScheduledAt: o.ScheduledAt, MaxAttempts: o.MaxAttempts,
		UniqueKey: o.UniqueKey, Unique: u, Metadata: o.Metadata, Timeout: o.Timeout, Deadline: o.Deadline,
		LimitKey: o.LimitKey, DeleteOnComplete: o.DeleteOnComplete, Tags: o.Tags, Encrypt: encrypts(args),
	}, nil
}

// encrypts reports whether args asks to be stored encrypted.
func encrypts(args Args) bool {
	e, ok := args.(EncryptedArgs)
	return ok && e.EncryptArgs()
}
