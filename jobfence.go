package jobfence

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/scheduler"
	"github.com/jobfence/jobfence/worker"
)

// Errors of a Client's life cycle; test for them with errors.Is.
var (
	// ErrAlreadyStarted reports Start on a Client that is running.
	ErrAlreadyStarted = errors.New("jobfence: client already started")
	// ErrNotStarted reports Stop on a Client that is not running: never
	// started, stopped already, or insert-only.
	ErrNotStarted = errors.New("jobfence: client not started")
	// ErrInsertOnly reports Start on a Client with no queues and no
	// schedules: it only inserts, and has nothing to run.
	ErrInsertOnly = errors.New("jobfence: client has no queues and no schedules: it is insert-only and has nothing to start")
)

// Client is a service's jobfence: it inserts jobs (Insert, InsertTx,
// InsertMany), and between Start and Stop it runs them with its handlers
// (a worker on Config.Queues) and enqueues the fires of its schedules (a
// scheduler). It is safe for concurrent use.
type Client struct {
	pg    *pgqueue.Client
	reg   *Registry
	wcfg  worker.Config // instrumented; a restart builds its worker from it
	sched *scheduler.Scheduler
	// admin is sched, or for a client without one an unstarted scheduler
	// of the same configuration, for Schedules.
	admin *scheduler.Scheduler
	// works is set when the client has queues, and so a worker.
	works bool

	// life serialises Start and Stop; a call waits for it within its ctx.
	life chan struct{}

	mu sync.Mutex
	// w is the worker (nil when insert-only); a worker cannot start twice,
	// so a Start after Stop replaces it.
	w *worker.Worker
	// used reports that w was started: the next Start needs a new one.
	used bool
	// running is set between a Start and the Stop that ends it.
	running bool
	// schedCancel ends the context of the scheduler's loop.
	schedCancel context.CancelFunc
}

// NewClient returns a Client on pool (its search_path decides the schema of
// jobfence's tables; run `jobfence migrate up`, or migrations.Up, first).
// It builds the pgqueue client, the worker when cfg has Queues and the
// scheduler when cfg has Queues or Schedules, instrumenting each with
// cfg.Telemetry, and checks the configuration: nothing runs until Start.
func NewClient(pool *pgxpool.Pool, cfg Config) (*Client, error) {
	if pool == nil {
		return nil, errors.New("jobfence: new client: nil pool")
	}
	if len(cfg.Worker.Queues) > 0 {
		return nil, errors.New("jobfence: new client: set Config.Queues, not Config.Worker.Queues")
	}
	hasHandlers := cfg.Handlers != nil && len(cfg.Handlers.Kinds()) > 0
	switch {
	case len(cfg.Queues) > 0 && !hasHandlers:
		return nil, errors.New("jobfence: new client: Config.Queues is set but Config.Handlers has no handler: register them with AddHandler, or drop Queues for an insert-only client")
	case len(cfg.Queues) == 0 && hasHandlers:
		return nil, errors.New("jobfence: new client: Config.Handlers has handlers but Config.Queues is empty: name the queues to work (e.g. {\"default\": 100}), or drop Handlers for an insert-only client")
	}

	pgCfg := cfg.PGQueue
	var ring *queue.KeyRing
	if cfg.Encryption != nil {
		if pgCfg.Encryption != nil || cfg.Worker.Encryption != nil {
			return nil, errors.New("jobfence: new client: set Config.Encryption, not PGQueue.Encryption or Worker.Encryption")
		}
		var err error
		if ring, err = queue.NewKeyRing(*cfg.Encryption); err != nil {
			return nil, fmt.Errorf("jobfence: new client: %w", err)
		}
		pgCfg.Encryption = ring
	}
	if pgCfg.Logger == nil {
		pgCfg.Logger = cfg.Logger
	}
	if cfg.Telemetry != nil {
		if err := cfg.Telemetry.InstrumentPGQueue(&pgCfg); err != nil {
			return nil, fmt.Errorf("jobfence: new client: telemetry: %w", err)
		}
	}
	c := &Client{pg: pgqueue.New(pool, pgCfg), reg: cfg.Handlers, life: make(chan struct{}, 1)}

	if len(cfg.Queues) > 0 {
		c.wcfg = cfg.Worker
		c.wcfg.Queues = maps.Clone(cfg.Queues)
		if ring != nil {
			c.wcfg.Encryption = ring
		}
		if c.wcfg.Logger == nil {
			c.wcfg.Logger = cfg.Logger
		}
		if cfg.Telemetry != nil {
			if err := cfg.Telemetry.InstrumentWorker(&c.wcfg); err != nil {
				return nil, fmt.Errorf("jobfence: new client: telemetry: %w", err)
			}
		}
		w, err := worker.New(c.pg, c.reg, c.wcfg)
		if err != nil {
			return nil, fmt.Errorf("jobfence: new client: %w", err)
		}
		c.w, c.works = w, true
	}

	// A client that works queues runs a scheduler even without schedules
	// of its own: it fires those added while the fleet runs
	// (Schedules().Put, `jobfence schedules add`).
	sCfg := cfg.Scheduler
	if sCfg.Logger == nil {
		sCfg.Logger = cfg.Logger
	}
	if sCfg.Retention <= 0 && (cfg.Worker.Retention > 0 || cfg.Worker.RetentionByState != (queue.Retention{})) {
		base := cfg.Worker.Retention
		if base <= 0 {
			base = scheduler.DefaultRetention // the worker's default too
		}
		// The shortest: a fire's job, whatever its end, is kept that long.
		sCfg.Retention = cfg.Worker.RetentionByState.WithDefault(base).Shortest()
	}
	if len(cfg.Queues) > 0 || len(cfg.Schedules) > 0 {
		if cfg.Telemetry != nil {
			if err := cfg.Telemetry.InstrumentScheduler(&sCfg); err != nil {
				return nil, fmt.Errorf("jobfence: new client: telemetry: %w", err)
			}
		}
		s := scheduler.New(c.pg, sCfg)
		for i, sc := range cfg.Schedules {
			if sc.Args == nil {
				return nil, fmt.Errorf("jobfence: new client: schedule %d (%q): Args is nil", i, sc.Name)
			}
			if err := s.AddArgs(sc.Name, sc.Spec, sc.Args, sc.Options); err != nil {
				return nil, fmt.Errorf("jobfence: new client: %w", err)
			}
		}
		c.sched = s
	}
	c.admin = c.sched
	if c.admin == nil {
		// Never started: Schedules uses its run-time methods only, which
		// need no loop.
		c.admin = scheduler.New(c.pg, sCfg)
	}
	return c, nil
}

// PGQueue returns the client's pgqueue.Client: the layer below, for what
// the Client does not pass through (the registry of workers, a limit's
// wait, EXPLAIN, maintenance). See docs/client.md.
func (c *Client) PGQueue() *pgqueue.Client { return c.pg }

// Worker returns the client's worker, for its Stats and RunOne; nil for an
// insert-only client. Start and Stop it through the Client. A Start after
// a Stop runs a new worker (a worker.Worker starts once), which Worker
// returns from then on.
func (c *Client) Worker() *worker.Worker {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.w
}

// Scheduler returns the client's scheduler, the layer below; nil for an
// insert-only client without schedules. Schedules changes the schedules
// on every client; Start and Stop the scheduler through the Client.
func (c *Client) Scheduler() *scheduler.Scheduler { return c.sched }

// Handlers returns Config.Handlers: the handlers the client's worker
// runs, nil for an insert-only client. jobfencetest.NewWorker runs them.
func (c *Client) Handlers() *Registry { return c.reg }

// WorkerConfig returns the configuration the client builds its worker
// from: Config.Worker with Config.Queues, Config.Logger and the
// Telemetry's instrumentation; the zero worker.Config for an insert-only
// client. jobfencetest.NewWorker builds its worker from it.
func (c *Client) WorkerConfig() worker.Config {
	c.mu.Lock()
	defer c.mu.Unlock()
	cfg := c.wcfg
	cfg.Queues = maps.Clone(c.wcfg.Queues)
	return cfg
}

// newWorker builds the worker of a Start after Stop from the
// configuration as the local queue changes (Queues().Add, Set, Remove)
// left it. With every queue removed it works none: a worker.Config
// without queues would work "default".
func (c *Client) newWorker() (*worker.Worker, error) {
	cfg := c.WorkerConfig()
	if len(cfg.Queues) > 0 {
		return worker.New(c.pg, c.reg, cfg)
	}
	cfg.Queues = map[string]int{queue.DefaultQueue: 1}
	w, err := worker.New(c.pg, c.reg, cfg)
	if err != nil {
		return nil, err
	}
	// Not started: this edits its queues and waits for nothing.
	if err := w.RemoveQueue(context.Background(), queue.DefaultQueue); err != nil {
		return nil, err
	}
	return w, nil
}

// Start starts the scheduler, which records the schedules and enqueues the
// fires missed since the last one as each schedule's catch-up policy says,
// and then the worker, and returns at once. While the database cannot be
// reached, Start retries until ctx ends; jobfence's tables missing is an
// error at once (errors.Is queue.ErrNotSetUp). If the worker cannot start,
// the scheduler is stopped again: Start starts both or neither.
//
// ctx bounds only the start itself: the client runs until Stop, whatever
// becomes of ctx. Start returns ErrAlreadyStarted on a running client and
// ErrInsertOnly on a client with no queues and no schedules. A client that
// Stop stopped may be started again.
func (c *Client) Start(ctx context.Context) error {
	if !c.works && c.sched == nil {
		return ErrInsertOnly
	}
	if err := c.lock(ctx); err != nil {
		return fmt.Errorf("jobfence: start: %w", err)
	}
	defer c.unlock()
	c.mu.Lock()
	running, w, used := c.running, c.w, c.used
	c.mu.Unlock()
	if running {
		return ErrAlreadyStarted
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("jobfence: start: %w", err)
	}
	if w != nil && used {
		nw, err := c.newWorker()
		if err != nil {
			return fmt.Errorf("jobfence: start: %w", err)
		}
		w = nw
	}

	var schedCancel context.CancelFunc
	if c.sched != nil {
		// The scheduler's loop runs until its Start's ctx ends: give it a
		// context that ctx cancels only while Start runs.
		runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		release := context.AfterFunc(ctx, cancel)
		err := c.sched.Start(runCtx)
		if !release() && err == nil {
			// ctx ended as the scheduler started: its loop is ending.
			err = context.Cause(ctx)
			_ = c.sched.Stop(context.WithoutCancel(ctx))
		}
		if err != nil {
			cancel()
			return fmt.Errorf("jobfence: start: %w", err)
		}
		schedCancel = cancel
	}
	if w != nil {
		if err := w.Start(ctx); err != nil {
			if c.sched != nil {
				// One fire's transaction at most, bounded by
				// scheduler.Config.EnqueueTimeout.
				_ = c.sched.Stop(context.WithoutCancel(ctx))
				schedCancel()
			}
			return fmt.Errorf("jobfence: start: %w", err)
		}
	}

	c.mu.Lock()
	c.w, c.used, c.running, c.schedCancel = w, w != nil, true, schedCancel
	c.mu.Unlock()
	return nil
}

// Stop stops the client: first the scheduler, which enqueues no fire after
// Stop returns (one being enqueued commits, or is rolled back once ctx
// ends), then the worker, which claims no new job and waits for the
// running ones to finish and their outcomes to be recorded. If ctx ends
// first, the handlers still running have their contexts cancelled and
// their jobs are put back to run again without spending an attempt (see
// worker.Worker.Stop): Stop returns soon after ctx's deadline, with an
// error wrapping ctx's, whatever the handlers do. The worker then waits,
// within ctx, for the releases of workflow dependents that its completions
// started, so the pool may be closed once Stop returns. The errors of both
// components are joined.
//
// Stop returns ErrNotStarted on a client that is not running (never
// started, stopped already, or insert-only). A Stop called while Start or
// another Stop is under way waits for it, within ctx.
func (c *Client) Stop(ctx context.Context) error {
	if err := c.lock(ctx); err != nil {
		return fmt.Errorf("jobfence: stop: %w", err)
	}
	defer c.unlock()
	c.mu.Lock()
	running, w, schedCancel := c.running, c.w, c.schedCancel
	c.running, c.schedCancel = false, nil
	c.mu.Unlock()
	if !running {
		return ErrNotStarted
	}
	var errs []error
	if c.sched != nil {
		if err := c.sched.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("jobfence: stop scheduler: %w", err))
		}
		schedCancel()
	}
	if w != nil {
		if err := w.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("jobfence: stop worker: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Close ends the client's work in the background, so that its pool may be
// closed next: it stops a running client (Stop, within ctx), then waits,
// within ctx, for the wake-ups that its inserts and outcomes left to send
// and the releases of workflow dependents its completions left to run,
// and then stops sending them in the background. A client that only
// inserts has no Stop: Close is what it needs before the pool closes,
// lest the last inserts' wake-ups be cut short (the workers would then
// find those jobs at their next poll). A closed client still inserts,
// each insert sending its own wake-up; to run jobs again, make a new
// client. The errors of the stop and of the wait are joined.
func (c *Client) Close(ctx context.Context) error {
	var errs []error
	if err := c.Stop(ctx); err != nil && !errors.Is(err, ErrNotStarted) {
		errs = append(errs, err)
	}
	if err := c.pg.WaitReleases(ctx); err != nil {
		errs = append(errs, fmt.Errorf("jobfence: close: %w", err))
	}
	c.pg.Close()
	return errors.Join(errs...)
}

func (c *Client) lock(ctx context.Context) error {
	select {
	case c.life <- struct{}{}:
		return nil
	default:
	}
	select {
	case c.life <- struct{}{}:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (c *Client) unlock() { <-c.life }

// Insert inserts one job of kind args.Kind() with opts (nil takes every
// default: see InsertOpts) and wakes the idle workers of its queue, in
// this process and in the others. With a UniqueKey that a stored job
// holds already, or UniqueOpts that an unfinished duplicate refuses,
// nothing is inserted and the result names that job and its state, with
// Inserted false. Any client may insert, running or not, insert-only or
// not; the job runs on whichever instance works its queue.
func (c *Client) Insert(ctx context.Context, args Args, opts *InsertOpts) (InsertResult, error) {
	if args == nil {
		return InsertResult{}, errors.New("jobfence: insert: nil args")
	}
	r, err := c.pg.Insert(ctx, args, opts)
	if err != nil {
		return r, fmt.Errorf("jobfence: insert %s: %w", args.Kind(), err)
	}
	return r, nil
}

// InsertTx is Insert inside the caller's transaction: the job exists, and
// workers are woken, only if tx commits, so a row and its job are written
// together or not at all.
func (c *Client) InsertTx(ctx context.Context, tx pgx.Tx, args Args, opts *InsertOpts) (InsertResult, error) {
	if args == nil {
		return InsertResult{}, errors.New("jobfence: insert: nil args")
	}
	r, err := c.pg.InsertTx(ctx, tx, args, opts)
	if err != nil {
		return r, fmt.Errorf("jobfence: insert %s: %w", args.Kind(), err)
	}
	return r, nil
}

// InsertManyParams is one job of InsertMany: its arguments and, if not
// nil, its options.
type InsertManyParams struct {
	Args       Args
	InsertOpts *InsertOpts
}

// InsertMany inserts jobs in one round trip (COPY for jobs that run now
// without a unique key) and returns how many it inserted: a job whose
// unique key a stored job holds (or an earlier job of the batch) is not
// inserted, and not counted. Either
// every job is inserted or, on an error, none is. No jobs, no round trip.
func (c *Client) InsertMany(ctx context.Context, jobs []InsertManyParams) (int64, error) {
	if len(jobs) == 0 {
		return 0, nil
	}
	ps, err := manyParams(jobs)
	if err != nil {
		return 0, err
	}
	n, err := c.pg.EnqueueMany(ctx, ps)
	if err != nil {
		return n, fmt.Errorf("jobfence: insert many: %w", err)
	}
	return n, nil
}

// InsertManyTx is InsertMany inside the caller's transaction.
func (c *Client) InsertManyTx(ctx context.Context, tx pgx.Tx, jobs []InsertManyParams) (int64, error) {
	if len(jobs) == 0 {
		return 0, nil
	}
	ps, err := manyParams(jobs)
	if err != nil {
		return 0, err
	}
	n, err := c.pg.EnqueueManyTx(ctx, tx, ps)
	if err != nil {
		return n, fmt.Errorf("jobfence: insert many: %w", err)
	}
	return n, nil
}

func manyParams(jobs []InsertManyParams) ([]queue.EnqueueParams, error) {
	ps := make([]queue.EnqueueParams, len(jobs))
	for i, j := range jobs {
		if j.Args == nil {
			return nil, fmt.Errorf("jobfence: insert many: job %d: nil args", i)
		}
		p, err := queue.Params(j.Args, j.InsertOpts)
		if err != nil {
			return nil, fmt.Errorf("jobfence: insert many: job %d: %w", i, err)
		}
		ps[i] = p
	}
	return ps, nil
}

// Get returns the stored job id, or an error wrapping queue.ErrJobNotFound.
func (c *Client) Get(ctx context.Context, id int64) (*queue.Job, error) {
	return c.pg.Get(ctx, id)
}

// Cancel cancels a job that has not finished; a running job's worker, in
// whichever instance, cancels its handler's context at once. See
// pgqueue.Client.Cancel.
func (c *Client) Cancel(ctx context.Context, id int64) error {
	return c.pg.Cancel(ctx, id)
}
