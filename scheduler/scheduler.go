package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// Defaults applied to zero fields of Config.
const (
	// DefaultRetention is the job retention a Scheduler assumes: the
	// worker's default for pruning final jobs.
	DefaultRetention = 24 * time.Hour
	// DefaultGrace is how late a fire may be enqueued and still count as on
	// time rather than missed.
	DefaultGrace = 10 * time.Second
	// DefaultEnqueueTimeout bounds each fire's transaction, and each of
	// Start's statements.
	DefaultEnqueueTimeout = 30 * time.Second
	// DefaultSyncInterval is how often a running Scheduler reads the
	// schedules table for changes made while the fleet runs.
	DefaultSyncInterval = 2 * time.Second
)

// Timing of the tick loop.
const (
	// maxSleep bounds one sleep of the loop, so a wall clock stepped by NTP
	// is noticed within a minute.
	maxSleep = time.Minute
	// maxBackoff bounds the wait before retrying a schedule whose enqueue
	// failed.
	maxBackoff = 30 * time.Second
	// resyncDelay is the least wait before the loop reads the table again
	// after a fire was refused because the schedule changed under it.
	resyncDelay = 50 * time.Millisecond
)

// Config tunes a Scheduler. The zero value is ready to use.
type Config struct {
	// Now reads this host's clock; nil means time.Now. The loop sleeps until
	// Now reaches a fire time, so a skewed clock enqueues a fire early or
	// late, but always under the same unique key.
	Now func() time.Time
	// Logger receives the scheduler's logs; nil means slog.Default().
	Logger *slog.Logger
	// Retention is how long the fleet keeps final jobs before pruning them
	// (the retention passed to Prune); zero or less means DefaultRetention.
	// A fire's unique key protects it only while its job is stored, so Add
	// refuses a catch-up window that is not shorter than Retention, and no
	// fire older than Retention by the database's clock is ever enqueued.
	Retention time.Duration
	// Grace is how late a fire may be enqueued and still count as on time;
	// older fires are missed and follow the schedule's catch-up policy, which
	// logs a warning naming those it drops. A fire that came due while the
	// running loop was busy enqueuing other fires is never missed: only
	// downtime, a stopped process or a failing enqueue misses fires. Zero or
	// less means DefaultGrace.
	Grace time.Duration
	// EnqueueTimeout bounds each fire's transaction as this instance sees
	// it, from BEGIN to COMMIT, and each of Start's statements. A fire
	// whose transaction runs out of it (a partition, a black-holed route:
	// the query would otherwise wait until TCP gives up, many minutes later,
	// and every schedule of the instance with it) fails, is logged and is
	// retried with backoff, while the other schedules go on. The server
	// ends the transaction once it sits idle 2 seconds (or EnqueueTimeout
	// if shorter), so that an instance frozen mid-fire (a paused VM) holds
	// up the other instances' fires of the schedule that long at most.
	// Zero or less means DefaultEnqueueTimeout.
	EnqueueTimeout time.Duration
	// OnFire, if set, is called from the scheduler's loop after each fire's
	// transaction commits, for every fire this instance handled: inserted
	// by it or found already enqueued by another instance. It must return
	// quickly.
	OnFire func(Fire)
	// SyncInterval is how often the loop reads the schedules table for
	// schedules added, changed, paused, resumed or deleted while the fleet
	// runs (Put, Pause, Resume, Delete, or another instance's Start): every
	// instance picks a change up within SyncInterval, one small query each
	// time (a schedule's row is read again only when its version moved).
	// A change made through this Scheduler's own methods is picked up at
	// once. Zero or less means DefaultSyncInterval.
	SyncInterval time.Duration
	// OnMissed, if set, is called from the scheduler's loop for the missed
	// fires of a schedule that its catch-up policy drops, when they are
	// logged. Each instance that finds them calls it, so across a fleet the
	// same fires may be reported by several instances. It must return
	// quickly.
	OnMissed func(Missed)
}

// Missed reports missed fires of a schedule that its catch-up policy
// dropped: fires from First to Last, Fires of them.
type Missed struct {
	// Schedule is the schedule's name.
	Schedule string
	// Fires counts the dropped fires; fires older than the catch-up window
	// are counted up to MaxCountedMissed per report, so a schedule that
	// was down for months does not stall the loop counting them.
	Fires int
	// First and Last are the first and last dropped fire.
	First, Last time.Time
	// BeforeWindow is true for fires dropped because they are older than
	// the catch-up window, whatever the policy.
	BeforeWindow bool
}

// MaxCountedMissed caps Missed.Fires for fires older than the catch-up
// window.
const MaxCountedMissed = 10_000

// Fire reports what one instance did with one fire of a schedule
// (Config.OnFire, Trigger), or which fire a job runs for (FireOf).
type Fire struct {
	// Schedule is the schedule's name.
	Schedule string
	// At is the fire time: the instant the spec names (or, for a Trigger,
	// the database's clock at the trigger, to the second). It is recorded
	// in the job's unique key and metadata when the fire is enqueued, and
	// is the job's first ScheduledAt; a retry, a snooze or a rescue moves
	// the job's ScheduledAt, never At.
	At time.Time
	// JobID is the fire's job, inserted by this instance or by another.
	JobID int64
	// Inserted is true when this instance inserted the job (always false
	// from FireOf).
	Inserted bool
	// Skipped is true when this instance inserted the job already cancelled
	// because an earlier run of the schedule had not finished (see
	// Options.SkipIfRunning).
	Skipped bool
	// Triggered is true for a fire enqueued by Trigger ("run now") rather
	// than by the schedule's spec.
	Triggered bool
}

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

// Scheduler enqueues the fires of cron schedules as jobs. Run one in every
// instance of a service with the same schedules: each fire becomes one job
// for the whole fleet, because every instance inserts it under the unique key
// cron:<name>:<fire's Unix time> and only the first insert wins. A running
// Scheduler also fires the schedules added to the table at run time (Put),
// and follows pauses and changes (see the package documentation).
type Scheduler struct {
	client *pgqueue.Client
	cfg    Config
	logger *slog.Logger

	mu sync.Mutex
	// defined are the schedules added in code (Add), by name in names.
	defined  []*schedule
	names    map[string]bool
	started  bool
	stopping bool // Stop is waiting for the loop to exit; started is still true
	stop     chan struct{}
	cancel   context.CancelFunc
	done     chan struct{}
	// kick asks the running loop to read the schedules table now.
	kick chan struct{}

	// Owned by Start, then by the loop goroutine.
	// schedules are the schedules this instance fires: the rows of origin
	// runtime and the rows of the names in defined, paused ones included.
	schedules []*schedule
	// broken holds the version of rows that cannot be used (a spec or zone
	// this host cannot read), so that each is logged once.
	broken map[string]int64
	// syncFailing is true while reading the table fails.
	syncFailing bool
}

// New returns a Scheduler that enqueues through client.
func New(client *pgqueue.Client, cfg Config) *Scheduler {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.EnqueueTimeout <= 0 {
		cfg.EnqueueTimeout = DefaultEnqueueTimeout
	}
	if cfg.SyncInterval <= 0 {
		cfg.SyncInterval = DefaultSyncInterval
	}
	return &Scheduler{
		client: client, cfg: cfg, logger: cfg.Logger, names: map[string]bool{},
		kick: make(chan struct{}, 1), broken: map[string]int64{},
	}
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
	return buildSchedule(name, spec, kind, encoded, opts, retention, grace, now, true)
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

// Stop ends the loop, letting a fire being enqueued commit (but enqueuing
// no other schedule's fires), and waits for it. If ctx ends first, the
// fire's transaction is cancelled (so it enqueues nothing) and Stop returns
// ctx's error. Until Stop returns, Add, Start and Stop return ErrStopping;
// afterwards the Scheduler may be started again.
func (s *Scheduler) Stop(ctx context.Context) error {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return ErrStopping
	}
	if !s.started {
		s.mu.Unlock()
		return ErrNotStarted
	}
	s.stopping = true
	stop, done, cancel := s.stop, s.done, s.cancel
	close(stop)
	s.mu.Unlock()
	// The schedules belong to the loop until it exits.
	defer func() {
		cancel()
		s.mu.Lock()
		s.started, s.stopping = false, false
		s.mu.Unlock()
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		cancel()
		<-done
		return ctx.Err()
	}
}

// loop sleeps until the earliest fire of the schedules by the host's clock
// and enqueues every due fire, reading the schedules table for changes
// every SyncInterval, when kicked, and at once after a fire was refused
// because its schedule changed. busy is when the previous tick (or Start)
// ended: fires that came due before it came while this instance was busy,
// not down.
func (s *Scheduler) loop(ctx context.Context, busy time.Time, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	timer := time.NewTimer(0)
	defer timer.Stop()
	nextSync := s.cfg.Now().Add(s.cfg.SyncInterval)
	resync := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-s.kick:
			resync = true
		case <-timer.C:
		}
		if now := s.cfg.Now(); resync || !now.Before(nextSync) {
			if s.sync(ctx, now, false) == nil {
				resync = false
			}
			nextSync = s.cfg.Now().Add(s.cfg.SyncInterval)
		}
		wake, refused := s.tick(ctx, stop, busy)
		busy = s.cfg.Now()
		wake = earlier(wake, nextSync)
		d := wake.Sub(busy)
		if refused {
			resync = true
			d = resyncDelay
		}
		d = max(0, min(d, maxSleep))
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(d)
	}
}

// tick enqueues the due fires of every schedule, until stop is closed or ctx
// ends, and returns when it should run again by the host's clock, and
// whether a fire was refused because its schedule changed in the table
// (paused, replaced or deleted): the loop then reads the table again at
// once. A fire that came due before busy (the end of the previous tick) is
// on time however late it now is, unless the schedule's last enqueue failed
// or the schedule was just loaded: it came while this instance was
// enqueuing other fires, and one slow schedule must not make the others
// miss fires. Only downtime, a stopped process or a failing enqueue makes
// fires missed.
func (s *Scheduler) tick(ctx context.Context, stop <-chan struct{}, busy time.Time) (time.Time, bool) {
	now := s.cfg.Now()
	wake := now.Add(maxSleep)
	refused := false
	for _, sc := range s.schedules {
		// Stop waits for one fire's enqueue, not for every due schedule's.
		select {
		case <-stop:
			return wake, refused
		default:
		}
		if ctx.Err() != nil {
			return wake, refused
		}
		if sc.paused {
			continue
		}
		if now.Before(sc.retryAt) {
			wake = earlier(wake, sc.retryAt)
			continue
		}
		if next := sc.spec.Next(sc.cursor); !next.IsZero() && !next.After(now) {
			b := busy
			if sc.failures > 0 || sc.fresh {
				b = time.Time{}
			}
			fires, m := sc.catchUp.due(sc.spec, sc.cursor, b, now)
			if len(fires) > 0 {
				if err := s.enqueue(ctx, sc, fires); err != nil {
					if ctx.Err() != nil {
						return wake, refused
					}
					if errors.Is(err, errChanged) {
						// The loop reads the schedule's row again and
						// handles these fires as the row now says.
						s.logger.Debug("scheduler: fire refused: the schedule changed in the table", "schedule", sc.name, "error", err)
						refused = true
						continue
					}
					sc.failures++
					backoff := min(time.Duration(1<<min(sc.failures-1, 5))*time.Second, maxBackoff)
					sc.retryAt = now.Add(backoff)
					s.logger.Error("scheduler: enqueue failed; retrying",
						"schedule", sc.name, "fire", fires[0], "retry_in", backoff, "error", err)
					wake = earlier(wake, sc.retryAt)
					continue
				}
			}
			// The drop is final once the cursor moves past the fires.
			s.logMissed(sc, m)
			sc.cursor, sc.failures = now, 0
		}
		sc.fresh = false
		if next := sc.spec.Next(sc.cursor); !next.IsZero() {
			wake = earlier(wake, next)
		}
	}
	return wake, refused
}

// logMissed logs the missed fires of sc that its catch-up policy drops.
func (s *Scheduler) logMissed(sc *schedule, m missed) {
	if !m.beforeWindow.IsZero() {
		s.logger.Warn("scheduler: missed fires older than the catch-up window not enqueued",
			"schedule", sc.name, "first", m.beforeWindow, "until", m.windowEnd, "window", sc.catchUp.window)
		if s.cfg.OnMissed != nil {
			n, last := 0, m.beforeWindow
			sc.spec.firesIn(m.beforeWindow.Add(-time.Nanosecond), m.windowEnd, func(t time.Time) bool {
				n, last = n+1, t
				return n < MaxCountedMissed
			})
			s.cfg.OnMissed(Missed{Schedule: sc.name, Fires: n, First: m.beforeWindow, Last: last, BeforeWindow: true})
		}
	}
	if m.n > 0 {
		s.logger.Warn("scheduler: missed fires not enqueued",
			"schedule", sc.name, "policy", sc.catchUp.policy.String(), "missed", m.n, "first", m.first, "last", m.last, "grace", sc.catchUp.grace)
		if s.cfg.OnMissed != nil {
			s.cfg.OnMissed(Missed{Schedule: sc.name, Fires: m.n, First: m.first, Last: m.last})
		}
	}
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
