package jobfence

import (
	"log/slog"

	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/scheduler"
	"github.com/jobfence/jobfence/worker"
)

// Config configures a Client. The zero value is a working configuration:
// an insert-only client with the defaults of every package underneath.
type Config struct {
	// Queues maps each queue this client works to how many of its jobs
	// may run at once in this process. Empty: the client is insert-only
	// and builds no worker (see the package documentation). Set it here,
	// not in Worker.Queues.
	Queues map[string]int

	// Handlers are the handlers the client's worker runs, one per job
	// kind (see AddHandler and AddHandlerTx). Required with Queues, and
	// refused without them: a client with handlers but no queues would
	// run none of them. Register every kind before NewClient.
	Handlers *Registry

	// Schedules are the cron schedules whose fires the client enqueues
	// while it runs, each fire one job for the whole fleet (see package
	// scheduler). Every instance of a service should configure the same
	// schedules. A client with queues runs its scheduler even without
	// schedules, for those added while the fleet runs (Client.Schedules().Put,
	// `jobfence schedules add`); one with schedules runs it even without
	// queues, and the fires' jobs are worked by other processes.
	Schedules []Schedule

	// Logger receives the logs of each component whose own Logger (in
	// Worker, PGQueue or Scheduler) is nil. Default: slog.Default().
	Logger *slog.Logger

	// Telemetry, when set, instruments every component the client
	// builds, before it builds it: its inserts, its worker and its
	// scheduler. telemetry.Options implements it, so
	// Telemetry: telemetry.Options{} reports metrics and traces to the
	// global OpenTelemetry providers and adds trace ids to the worker's
	// logs. Hooks already set in Worker, PGQueue and Scheduler are kept
	// and chained. Nil: no instrumentation.
	Telemetry Telemetry

	// Worker tunes the worker: lease, heartbeats, job timeout, retry
	// policy, middleware, hooks, maintenance (see worker.Config, whose
	// zero fields take its documented defaults: a 30s lease, a 1m job
	// timeout, final jobs kept 24h). Its Queues must be empty: Queues
	// above decide. Unused by an insert-only client.
	Worker worker.Config

	// PGQueue tunes the PostgreSQL client that inserts, claims and
	// records outcomes: an insert hook, a LISTEN URL or poll-only mode
	// behind PgBouncer, the connections kept from transactional handlers
	// (see pgqueue.Config, whose zero value is ready to use).
	PGQueue pgqueue.Config

	// Encryption, when set, stores jobs' args encrypted with AES-256-GCM
	// under its keys, and opens them in this client's worker: the jobs of
	// the kinds whose args type implements EncryptedArgs, or every job
	// with Encryption.All (see docs/encryption.md). NewClient validates it
	// (32-byte keys, a Current among them) and refuses a client that also
	// sets PGQueue.Encryption or Worker.Encryption. Nil: nothing is
	// encrypted, a job that asks to be is refused at insert, and a worker
	// fails (into its retries) the jobs whose args it finds encrypted.
	Encryption *Encryption

	// Scheduler tunes the scheduler (see scheduler.Config, whose zero
	// value is ready to use). Its Retention defaults to Worker.Retention
	// when that is set (the shortest of Worker.RetentionByState), so that
	// no schedule catches up on fires whose jobs this fleet may have
	// pruned. Unused by an insert-only client
	// without Schedules.
	Scheduler scheduler.Config
}

// Schedule is a cron schedule of a Client: at each fire of Spec, one job
// with Args is enqueued for the whole fleet.
type Schedule struct {
	// Name identifies the schedule across the fleet and in the schedules
	// table (`jobfence schedules list`); required. The fire at t becomes
	// the job with the unique key scheduler.UniqueKey(Name, t).
	Name string
	// Spec is when it fires, in robfig/cron's syntax with an optional
	// seconds field: "0 3 * * *", "*/5 * * * *", "@hourly", "@every 90s"
	// (see package scheduler); required.
	Spec string
	// Args are the arguments of every fire's job, and Args.Kind() names
	// its handler; required.
	Args Args
	// Options are the jobs' queue, priority and attempts, the spec's time
	// zone, the catch-up policy after downtime and SkipIfRunning; the
	// zero value takes every default (queue "default", UTC, missed fires
	// skipped).
	Options scheduler.Options
}

// Telemetry instruments the components a Client builds: the Client calls
// each method on its component's configuration before building it, and
// only for the components it builds (no worker for an insert-only client,
// no scheduler for one without schedules either). telemetry.Options implements it; so can
// anything else that attaches through the packages' public hooks
// (pgqueue.Config.InsertHook, worker.Config.Hooks and Middleware,
// scheduler.Config.OnFire and OnMissed).
type Telemetry interface {
	// InstrumentPGQueue instruments the client's inserts.
	InstrumentPGQueue(cfg *pgqueue.Config) error
	// InstrumentWorker instruments the client's worker.
	InstrumentWorker(cfg *worker.Config) error
	// InstrumentScheduler instruments the client's scheduler.
	InstrumentScheduler(cfg *scheduler.Config) error
}
