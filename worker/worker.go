package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// Worker runs jobs from a backend with the handlers of a Registry.
type Worker struct {
	backend queue.Backend
	reg     *Registry
	cfg     Config
	log     *slog.Logger
	stats   counters
	// series is the backend's per-minute series (queue.SeriesRecorder),
	// nil when it keeps none.
	series queue.SeriesRecorder

	mu       sync.Mutex
	started  bool
	stopped  bool
	inflight map[int64]*running
	// aside holds handlers still running whose claim left inflight: a
	// newer claim of their job replaced it, or the worker gave up on them
	// but they kept their slot (see abandonRun). Stop gives up on these too.
	aside map[*running]struct{}
	// fetches are the queues' fetch states, by queue, each queue's kept
	// once made (a removed queue has size 0). Made by Start; changed
	// under mu.
	fetches map[string]*queueFetch
	// pausedSet is the last set of paused queues known, for the gates of
	// queues added later. Guarded by mu.
	pausedSet []string

	// qmu serialises the changes of the queues worked: the local calls
	// (AddQueue, SetQueue, RemoveQueue) and the stored settings' watcher.
	// It is taken before mu, and held while a queue's wake-up
	// subscription is set up, which mu never is (but in Start).
	qmu sync.Mutex
	// local holds the queues of this worker's configuration as its local
	// calls changed them, with their concurrency (0: removed); override
	// marks the queues a local call changed since their stored setting
	// last changed; stored holds the fleet's settings last read. Guarded
	// by qmu.
	local    map[string]int
	override map[string]bool
	stored   map[string]queue.QueueSetting
	// fetchCtx ends the fetch loops and bgCtx the background loops and
	// wake-up subscriptions, at Stop. Set by Start.
	fetchCtx, bgCtx context.Context
	// registryKick has the registry loop report the worker at once: the
	// queues it works changed.
	registryKick chan struct{}

	// batchers gather the jobs of the batch handlers' kinds into
	// batches, by kind. Set by New, read-only after.
	batchers map[string]*batcher

	finishCh chan pending
	// giveUp is closed when Stop's deadline passes while outcomes are still
	// being recorded: each remaining batch gets one last try.
	giveUp chan struct{}

	// interrupted is set (under mu) when Stop's deadline passed: running
	// handlers are cancelled and claimed jobs not yet started are put back.
	interrupted bool

	// fetchCancel stops the fetch loops; bgCancel stops heartbeats,
	// maintenance and listeners once the handlers are done.
	fetchCancel context.CancelFunc
	bgCancel    context.CancelFunc

	fetchWG, jobsWG, finishWG, bgWG sync.WaitGroup

	// leaseMargin is how long before its lease runs out, by this worker's
	// clock, a handler is cancelled: the rescuer judges the lease by the
	// database's clock, and the handler needs a moment to stop.
	leaseMargin time.Duration
	// afterCompleteTx, when set by a test, runs between a transactional
	// handler's fenced completion and its commit.
	afterCompleteTx func(*queue.Job)
	// helperMaxPerJob, when set by a test, replaces helperMaxPerJob: on a
	// loaded machine no claim is quick, and a test of the helper loops
	// must not depend on the machine's speed.
	helperMaxPerJob time.Duration
	// one serialises RunOne calls, which read the outcome they queued.
	one sync.Mutex

	// host, pid, queueNames (the queues worked, sorted; guarded by mu)
	// and startedAt are reported to a queue.Registrar.
	host       string
	pid        int
	queueNames []string
	startedAt  time.Time
}

// running is one job whose handler is running.
type running struct {
	job *queue.Job
	// fetch is the queue the job was claimed for (nil for RunOne).
	fetch *queueFetch
	// rc is what the handler's context carries (RecordOutput's output).
	rc     *runCtx
	lease  queue.Lease
	cancel context.CancelCauseFunc
	// ctx is the handler's context, as Hooks.JobStart returned it; took,
	// err and panicked are the handler's result. JobEnd reports them.
	ctx      context.Context
	took     time.Duration
	err      error
	panicked bool
	// backoff is how long the job's limit partition is to grant nothing
	// (JobRateLimited), sent with its outcome (queue.Finish.Backoff).
	backoff time.Duration
	// await is the signal the job suspends awaiting (AwaitSignal), sent
	// with its outcome (queue.Finish.Await).
	await string
	// leaseUntil is when the claim runs out as far as this worker knows:
	// the claim's expiry, pushed on by each successful heartbeat.
	leaseUntil time.Time
	// leaseTimer cancels the handler when leaseUntil (less the worker's
	// lease margin) passes without a heartbeat having pushed it on.
	leaseTimer *time.Timer
	// finishing is set once the handler has returned and its outcome is
	// being recorded. A heartbeat that then finds the claim gone has most
	// likely raced that very recording; cancelling is moot, and the
	// recording reports a stale outcome if the job was really lost.
	finishing atomic.Bool
	// tracked is when the handler was about to start.
	tracked time.Time
	// ctxEnd is when the handler's context ended, or will end at its
	// deadline (zero: no deadline and not cancelled). StuckGrace counts
	// from it. Set before track, then changed under Worker.mu.
	ctxEnd time.Time
	// state says whether the handler returned or the worker gave up on it
	// first (runActive, ...): the handler and the worker race for it.
	state atomic.Int32
	// aside is set while r is in Worker.aside (under Worker.mu).
	aside bool
	// late is set, by the handler's own goroutine, when the handler
	// returned after the worker gave up on it and let its slot go: its
	// outcome is recorded at once rather than by the completers, which
	// may have ended.
	late bool
	// endReported is set once JobEnd was called for r.
	endReported atomic.Bool
}

// New returns a worker for backend running reg's handlers. It checks the
// configuration; nothing runs until Start.
func New(backend queue.Backend, reg *Registry, cfg Config) (*Worker, error) {
	if backend == nil {
		return nil, errors.New("jobfence: worker: nil backend")
	}
	if reg == nil || len(reg.handlers) == 0 {
		return nil, errors.New("jobfence: worker: no handlers registered")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("worker", cfg.ID)
	host, _ := os.Hostname()
	if err := checkTx(backend, reg, cfg, log); err != nil {
		return nil, err
	}
	series, _ := backend.(queue.SeriesRecorder)
	concurrency := 0
	for _, n := range cfg.Queues {
		concurrency += n
	}
	return &Worker{
		backend:      backend,
		batchers:     newBatchers(reg, concurrency),
		series:       series,
		reg:          reg,
		cfg:          cfg,
		log:          log,
		inflight:     map[int64]*running{},
		aside:        map[*running]struct{}{},
		finishCh:     make(chan pending, 4*cfg.FinishBatch),
		giveUp:       make(chan struct{}),
		leaseMargin:  min(cfg.Lease/10, time.Second),
		host:         host,
		pid:          os.Getpid(),
		queueNames:   slices.Sorted(maps.Keys(cfg.Queues)),
		local:        maps.Clone(cfg.Queues),
		override:     map[string]bool{},
		stored:       map[string]queue.QueueSetting{},
		registryKick: make(chan struct{}, 1),
	}, nil
}

// checkTx refuses transactional handlers on a backend that cannot run
// them, and warns when fewer of them can hold a connection at once than
// the worker's concurrency: the rest wait for one.
func checkTx(backend queue.Backend, reg *Registry, cfg Config, log *slog.Logger) error {
	var kind string
	for _, h := range reg.handlers {
		if h.runTx != nil {
			kind = h.kind
			break
		}
	}
	if kind == "" {
		return nil
	}
	if _, ok := backend.(TxBackend); !ok {
		return fmt.Errorf("jobfence: worker: kind %q has a transactional handler but the backend %T cannot complete jobs in a transaction", kind, backend)
	}
	s, ok := backend.(interface{ TxSlots() int })
	if !ok {
		return nil
	}
	slots, want := s.TxSlots(), 0
	for _, n := range cfg.Queues {
		want += n
	}
	if slots == 0 {
		return fmt.Errorf("jobfence: worker: kind %q has a transactional handler, but the backend's pool has no connection to spare for it "+
			"beyond those reserved for heartbeats and claims: raise the pool's MaxConns (see pgqueue.Config.TxReserve)", kind)
	}
	if slots < want {
		log.Warn("jobfence: worker: fewer pool connections than concurrency: transactional handlers beyond the first few wait for a connection",
			"tx_slots", slots, "concurrency", want, "raise_max_conns_by", want-slots)
	}
	return nil
}

// ID returns the worker's ID.
func (w *Worker) ID() string { return w.cfg.ID }

// Stats returns a snapshot of the worker's counters.
func (w *Worker) Stats() Stats { return w.stats.snapshot() }

// Start starts fetching and running jobs and returns at once. An
// unreachable backend is not an error here: the fetch loops log it and
// retry with backoff until it is back. A backend that is not set up (see
// queue.Checker: jobfence's tables are missing) is: Start returns an error
// wrapping queue.ErrNotSetUp that says what to do. The worker runs until
// Stop; ctx bounds only the start itself.
func (w *Worker) Start(ctx context.Context) error {
	w.qmu.Lock()
	defer w.qmu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("jobfence: worker: already started")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := w.checkBackend(ctx); err != nil {
		return err
	}
	w.started = true
	w.startedAt = time.Now()

	bgCtx, bgCancel := context.WithCancel(context.Background())
	w.bgCtx, w.bgCancel = bgCtx, bgCancel
	fetchCtx, fetchCancel := context.WithCancel(context.Background())
	w.fetchCtx, w.fetchCancel = fetchCtx, fetchCancel

	for range w.cfg.Completers {
		w.finishWG.Add(1)
		go w.completer()
	}
	w.bgWG.Add(1)
	go w.heartbeatLoop(bgCtx)
	if c, ok := w.backend.(queue.Canceller); ok {
		if ch, err := c.Cancelled(bgCtx); err == nil {
			w.bgWG.Add(1)
			go w.cancelLoop(bgCtx, ch)
		} else {
			w.log.Warn("jobfence: cannot listen for cancellations; cancelled jobs stop at the next heartbeat", "err", err)
		}
	}
	if m, ok := w.backend.(queue.Maintainer); ok && !w.cfg.DisableMaintenance {
		w.bgWG.Add(1)
		go w.maintenanceLoop(bgCtx, m)
	}
	w.fetches = make(map[string]*queueFetch, len(w.local))
	if p, ok := w.backend.(queue.Promoter); ok {
		w.bgWG.Add(1)
		go w.promoteLoop(bgCtx, p)
	}
	if g, ok := w.backend.(queue.RefillGranter); ok {
		w.bgWG.Add(1)
		go w.refillLoop(bgCtx, g)
	}
	// The stored settings first: a queue paused, resized or stopped for
	// the fleet starts as they say.
	w.watchQueues(bgCtx)
	queues := map[string]int{}
	for _, q := range w.known() {
		if n := w.effective(q); n > 0 {
			queues[q] = n
			wake, stop := w.subscribeWake(q)
			w.startQueueLocked(q, n, wake, stop)
		}
	}
	if r, ok := w.backend.(queue.Registrar); ok {
		w.bgWG.Add(1)
		go w.registryLoop(bgCtx, r)
	}
	w.log.Info("jobfence: worker started", "queues", queues, "kinds", w.reg.Kinds())
	return nil
}

// Stop stops claiming new jobs and waits for running ones to finish and
// their outcomes to be recorded. If ctx ends first, the remaining handlers'
// contexts are cancelled with ErrWorkerStopping and their jobs are put back
// to run again without spending an attempt: each put-back is recorded on
// the job, and the queue.PutBackLimit-th in a row spends the attempt, so a
// job that keeps getting its worker restarted runs out of attempts. Stop
// then waits for those handlers to return, for Config.StuckGrace but at
// most a second. A handler that ignores its context does not hold Stop: it
// is given up on (Stats.Stuck), goes on in its goroutine, and its job is
// left to the rescuer once its lease runs out; Stop returns whatever
// handlers do. No job is lost: one whose outcome cannot be recorded keeps
// its claim until the lease expires and is then rescued.
//
// Once the outcomes are recorded, Stop waits, within ctx, for the
// releases of workflow dependents that its completions left to run after
// their commits, and for the wake-ups of the jobs they made ready
// (queue.ReleaseWaiter), so that closing the pool next cuts none short;
// one still running when ctx ends is logged and goes on.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	if !w.started || w.stopped {
		w.mu.Unlock()
		return nil
	}
	w.stopped = true
	w.mu.Unlock()

	w.fetchCancel()
	w.fetchWG.Wait()

	done := make(chan struct{})
	go func() { w.jobsWG.Wait(); close(done) }()
	var stopErr error
	select {
	case <-done:
	case <-ctx.Done():
		w.mu.Lock()
		w.interrupted = true
		for _, r := range w.inflight {
			w.cancelRun(r, ErrWorkerStopping)
		}
		w.mu.Unlock()
		n := w.waitOrAbandon(done)
		// The heartbeat may have given up on a cancelled handler first
		// (both wait StuckGrace from the cancel): count every handler
		// given up on that still runs, by whichever path.
		n = max(n, int(w.stats.stuckRunning.Load()))
		if n > 0 {
			stopErr = fmt.Errorf("jobfence: worker stop: %w; running jobs were interrupted and put back, "+
				"except %d whose handlers ignored their context: given up on, they are left to the rescuer", ctx.Err(), n)
		} else {
			stopErr = fmt.Errorf("jobfence: worker stop: %w; running jobs were interrupted and put back", ctx.Err())
		}
	}
	close(w.finishCh)
	flushed := make(chan struct{})
	go func() { w.finishWG.Wait(); close(flushed) }()
	select {
	case <-flushed:
	case <-ctx.Done():
		close(w.giveUp)
		<-flushed
		if stopErr == nil {
			stopErr = fmt.Errorf("jobfence: worker stop: %w; outcomes not yet recorded were left to the rescuer", ctx.Err())
		}
	}
	if rw, ok := w.backend.(queue.ReleaseWaiter); ok {
		if err := rw.WaitReleases(ctx); err != nil {
			w.log.Warn("jobfence: worker stopped before the releases and wake-ups that its outcomes started were done; "+
				"they go on in the background, a worker's maintenance releases any dependents that a closed pool cuts short, "+
				"and workers poll for jobs whose wake-up was cut short", "err", err)
		}
	}
	w.bgCancel()
	w.bgWG.Wait()
	if w.series != nil {
		// The counts since the last minute's flush.
		if err := w.series.FlushSeries(ctx); err != nil {
			w.log.Warn("jobfence: worker stopped before its last per-minute counts were written", "err", err)
		}
	}
	if r, ok := w.backend.(queue.Registrar); ok {
		w.deregister(ctx, r)
	}
	w.log.Info("jobfence: worker stopped", "stats", w.Stats())
	return stopErr
}

// claimed is a claimed job on its way to a runner.
type claimed struct {
	job *queue.Job
	// until is the end of the claim's lease by this worker's clock.
	until time.Time
}

// pending is an outcome on its way to the backend; r stays tracked (and
// heartbeated) until the outcome is recorded.
type pending struct {
	f queue.Finish
	r *running
	// outcome is the outcome Hooks.JobEnd reports (a retry out of
	// attempts is a discard).
	outcome queue.Outcome
	// logs are what the attempt's handler logged (Logger), stored before
	// the outcome is sent; nil if nothing.
	logs *queue.AttemptLogs
}

// runner executes f's jobs until f.out is closed, releasing a slot after
// each. A runner whose handler the worker gave up on leaves as soon as the
// handler returns: its slot and its place in jobsWG went to a new runner
// (or Stop let them go).
func (w *Worker) runner(f *queueFetch) {
	var reserve [runnerStackReserve]byte
	holdStack(reserve[:])
	for c := range f.out {
		if w.execute(f, c.job, c.until) {
			return
		}
		f.release()
		if f.leaveIfSpare() {
			w.jobsWG.Done()
			return
		}
	}
	w.jobsWG.Done()
}

// runnerStackReserve is stack a runner keeps in use while it waits for a
// job. The garbage collector halves the stack of a goroutine that uses less
// than a quarter of it, so idle runners lost the stack their last job grew,
// and every job paid for growing it again in runtime.copystack. Holding
// 8 KiB keeps stacks of up to 32 KiB (docs/benchmarks/code.md).
const runnerStackReserve = 8 << 10

// holdStack makes b, a runner's reserve, look used, so the compiler keeps
// it in the runner's frame; it does not escape, so it stays on the stack.
//
//go:noinline
func holdStack(b []byte) { b[0] = 1 }

// track registers a running claim; it reports false once Stop's deadline
// has passed, when the job must be put back instead of run. A claim of the
// same job that is still tracked is older (this worker lost it and claimed
// the job again): its handler is told so.
func (w *Worker) track(r *running) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.interrupted {
		return false
	}
	if old := w.inflight[r.lease.ID]; old != nil {
		w.cancelRun(old, ErrLeaseLost)
		if old.state.Load() == runActive {
			// Its handler still runs: the worker may yet give up on it.
			w.aside[old], old.aside = struct{}{}, true
		}
	}
	w.inflight[r.lease.ID] = r
	r.tracked = time.Now()
	r.leaseTimer = time.AfterFunc(r.leaseUntil.Sub(r.tracked)-w.leaseMargin, func() { w.leaseRanOut(r) })
	return true
}

// untrack forgets r, unless a newer claim of the same job replaced it.
func (w *Worker) untrack(r *running) {
	w.mu.Lock()
	if w.inflight[r.lease.ID] == r {
		delete(w.inflight, r.lease.ID)
	}
	if r.aside {
		delete(w.aside, r)
		r.aside = false
	}
	if r.leaseTimer != nil {
		r.leaseTimer.Stop()
	}
	w.mu.Unlock()
}
