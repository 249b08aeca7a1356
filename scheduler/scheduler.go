package scheduler

import (
	"context"
	"log/slog"
	"sync"
	"time"

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
