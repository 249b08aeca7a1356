package scheduler

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// Options are the optional settings of one schedule; the zero value takes
// every default.
type Options struct {
	// Queue, Priority and MaxAttempts are the jobs' settings; zero values
	// take those of the args type's own InsertOpts when it carries its
	// insert defaults (queue.InsertOptsProvider), then the defaults of
	// queue.EnqueueParams. (The type's Timeout bounds the fires' jobs
	// through their handler: see worker.HandlerOptions.Timeout. A fire's
	// time and unique key are the schedule's; the type's ScheduledAt,
	// UniqueKey, Deadline and Metadata are not used.)
	Queue       string
	Priority    int
	MaxAttempts int
	// TimeZone is the IANA zone the spec's fields are read in (for example
	// Europe/Paris) when the spec has no CRON_TZ= prefix; empty means UTC.
	TimeZone string
	// CatchUp is the policy for missed fires; the zero value is CatchUpSkip.
	CatchUp CatchUpPolicy
	// CatchUpWindow is how far back CatchUpLatest and CatchUpAll look for
	// missed fires; zero means half of Config.Retention. It must be shorter
	// than Config.Retention.
	CatchUpWindow time.Duration
	// SkipIfRunning skips a fire while a job of an earlier fire of the same
	// schedule is not final (waiting, running or retrying): the fire's job
	// is inserted already cancelled, with the reason in its errors, so every
	// instance sees the decision. Without it, each fire is one job however
	// long earlier ones run.
	SkipIfRunning bool
}

// schedule is one schedule: added in code (Add) or read from its row.
type schedule struct {
	name    string
	specStr string
	spec    *Spec
	params  queue.EnqueueParams // without ScheduledAt, UniqueKey and Metadata
	catchUp catchUp
	// window is Options.CatchUpWindow as given: zero for the default.
	window time.Duration
	skip   bool

	// From the schedule's row: the version the definition above is, and
	// whether the schedule is paused.
	version int64
	paused  bool
	// lastFire and firesFrom are the row's, as read: where the schedule
	// starts when this instance first reads it (see anchor).
	lastFire, firesFrom *time.Time

	// Loop state, owned by the loop goroutine once started.
	cursor   time.Time // fires at or before cursor are handled
	failures int
	retryAt  time.Time
	// fresh is true for a schedule the loop has not ticked yet: its fires
	// before cursor came while no instance of this one knew it, so they
	// follow the catch-up policy rather than counting as late.
	fresh bool
}

// Add registers the schedule name, defined in code: at each fire of spec,
// a job of kind with args (encoded with encoding/json; a json.RawMessage is
// used as is, nil means {}) is enqueued. Every instance of a service should
// Add the same schedules before Start, which writes them to the schedules
// table (the code's definition replaces the stored one, and a schedule
// paused in the table stays paused). Only instances that Add a name fire
// it; a schedule added while the fleet runs (Put) is fired by every
// instance. Add returns a *ScheduleError naming the schedule and its spec
// when the spec does not parse, its time zone is unknown, the name was
// already added, or the options cannot be used, and ErrStarted after Start
// (use Put to add a schedule to a running fleet).
func (s *Scheduler) Add(name, spec, kind string, args any, opts Options) error {
	sc, err := s.newSchedule(name, spec, kind, args, opts)
	if err != nil {
		return err
	}
	fail := func(err error) error { return &ScheduleError{Name: name, Spec: spec, Err: err} }
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return fail(ErrStopping)
	}
	if s.started {
		return fail(ErrStarted)
	}
	if s.names[name] {
		return fail(ErrDuplicateName)
	}
	s.names[name] = true
	s.defined = append(s.defined, sc)
	return nil
}

// newSchedule checks a schedule's definition and returns it, or a
// *ScheduleError saying what is wrong with it.
func (s *Scheduler) newSchedule(name, spec, kind string, args any, opts Options) (*schedule, error) {
	return checkSchedule(name, spec, kind, args, opts, s.cfg.Retention, s.cfg.Grace, s.cfg.Now())
}

// checkSchedule encodes args and checks a schedule's definition as Add
// does.
func checkSchedule(name, spec, kind string, args any, opts Options, retention, grace time.Duration, now time.Time) (*schedule, error) {
	if p, ok := args.(queue.InsertOptsProvider); ok {
		d := p.InsertOpts()
		if opts.Queue == "" {
			opts.Queue = d.Queue
		}
		if opts.Priority == 0 {
			opts.Priority = d.Priority
		}
		if opts.MaxAttempts == 0 {
			opts.MaxAttempts = d.MaxAttempts
		}
	}
	var encoded []byte
	if args != nil {
		var err error
		if encoded, err = json.Marshal(args); err != nil {
			return nil, &ScheduleError{Name: name, Spec: spec, Err: fmt.Errorf("%w: encode args: %v", ErrInvalidOptions, err)}
		}
	}
	sc, err := buildSchedule(name, spec, kind, encoded, opts, retention, grace, now, true)
	if err != nil {
		return nil, err
	}
	// An args type that asks for encryption has each fire's job encrypted
	// by the inserting client's key ring, as a typed insert would.
	if e, ok := args.(queue.EncryptedArgs); ok && e.EncryptArgs() {
		sc.params.Encrypt = true
	}
	return sc, nil
}

// buildSchedule checks a schedule's definition, with its args encoded, and
// returns it, or a *ScheduleError. With mustFire, a spec that never fires
// after now is refused.
func buildSchedule(name, spec, kind string, args []byte, opts Options, retention, grace time.Duration, now time.Time, mustFire bool) (*schedule, error) {
	fail := func(err error) error { return &ScheduleError{Name: name, Spec: spec, Err: err} }
	if name == "" {
		return nil, fail(fmt.Errorf("%w: the name is empty", ErrInvalidOptions))
	}
	sp, err := ParseSpec(spec, opts.TimeZone)
	if err != nil {
		return nil, fail(err)
	}
	if mustFire && sp.Next(now).IsZero() {
		return nil, fail(fmt.Errorf("%w: it never fires", ErrInvalidSpec))
	}
	if args != nil && !json.Valid(args) {
		return nil, fail(fmt.Errorf("%w: args are not valid JSON", ErrInvalidOptions))
	}
	params := queue.EnqueueParams{
		Kind: kind, Args: args, Queue: opts.Queue, Priority: opts.Priority, MaxAttempts: opts.MaxAttempts,
	}.WithDefaults()
	if err := params.Validate(); err != nil {
		return nil, fail(fmt.Errorf("%w: %v", ErrInvalidOptions, err))
	}
	cu := catchUp{policy: opts.CatchUp, grace: grace, window: opts.CatchUpWindow}
	switch {
	case opts.CatchUp < CatchUpSkip || opts.CatchUp > CatchUpAll:
		return nil, fail(fmt.Errorf("%w: unknown catch-up policy %d", ErrInvalidOptions, int(opts.CatchUp)))
	case cu.window < 0:
		return nil, fail(fmt.Errorf("%w: CatchUpWindow %v is negative", ErrInvalidOptions, cu.window))
	case cu.window == 0:
		cu.window = retention / 2
	case cu.window >= retention:
		return nil, fail(fmt.Errorf("%w: CatchUpWindow %v is not shorter than the job retention %v: a fire older than the retention may have been pruned and would run twice",
			ErrInvalidOptions, cu.window, retention))
	}
	return &schedule{
		name: name, specStr: spec, spec: sp, params: params, catchUp: cu, window: opts.CatchUpWindow, skip: opts.SkipIfRunning,
	}, nil
}

// AddArgs is Add for typed arguments: the jobs are of kind args.Kind().
func (s *Scheduler) AddArgs(name, spec string, args queue.Args, opts Options) error {
	return s.Add(name, spec, args.Kind(), args, opts)
}
