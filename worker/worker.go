package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
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

	mu       sync.Mutex
	started  bool
	stopped  bool
	inflight map[int64]*running

	finishCh chan queue.Finish

	// interrupted is set (under mu) when Stop's deadline passed: running
	// handlers are cancelled and claimed jobs not yet started are put back.
	interrupted bool

	// fetchCancel stops the fetch loops; bgCancel stops heartbeats,
	// maintenance and listeners once the handlers are done.
	fetchCancel context.CancelFunc
	bgCancel    context.CancelFunc

	fetchWG, jobsWG, finishWG, bgWG sync.WaitGroup
}

// running is one job whose handler is running.
type running struct {
	lease  queue.Lease
	cancel context.CancelCauseFunc
	// leaseUntil is when the claim runs out as far as this worker knows:
	// the claim's expiry, pushed on by each successful heartbeat.
	leaseUntil time.Time
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
	if _, ok := backend.(TxBackend); !ok {
		for _, h := range reg.handlers {
			if h.runTx != nil {
				return nil, fmt.Errorf("jobfence: worker: kind %q has a transactional handler but the backend %T cannot complete jobs in a transaction", h.kind, backend)
			}
		}
	}
	return &Worker{
		backend:  backend,
		reg:      reg,
		cfg:      cfg,
		log:      cfg.Logger.With("worker", cfg.ID),
		inflight: map[int64]*running{},
		finishCh: make(chan queue.Finish, 4*cfg.FinishBatch),
	}, nil
}

// ID returns the worker's ID.
func (w *Worker) ID() string { return w.cfg.ID }

// Stats returns a snapshot of the worker's counters.
func (w *Worker) Stats() Stats { return w.stats.snapshot() }

// Start starts fetching and running jobs and returns at once. An
// unreachable backend is not an error here: the fetch loops log it and
// retry with backoff until it is back. The worker runs until Stop; ctx
// bounds only the start itself.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("jobfence: worker: already started")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	w.started = true

	bgCtx, bgCancel := context.WithCancel(context.Background())
	w.bgCancel = bgCancel
	fetchCtx, fetchCancel := context.WithCancel(context.Background())
	w.fetchCancel = fetchCancel

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
	for q, n := range w.cfg.Queues {
		var wake <-chan struct{}
		if wk, ok := w.backend.(queue.Waker); ok {
			ch, err := wk.Wake(bgCtx, q)
			if err != nil {
				w.log.Warn("jobfence: no wake-ups; polling", "queue", q, "err", err)
			}
			wake = ch
		}
		// Long-lived runners, one per slot, keep their grown stacks: a
		// goroutine per job would grow a fresh stack for every job.
		slots := make(chan struct{}, n)
		freed := make(chan struct{}, 1)
		jobs := make(chan *queue.Job, n)
		release := func() {
			<-slots
			select {
			case freed <- struct{}{}:
			default:
			}
		}
		for range n {
			w.jobsWG.Add(1)
			go w.runner(jobs, release)
		}
		var loops sync.WaitGroup
		for range min(w.cfg.Fetchers, n) {
			loops.Add(1)
			w.fetchWG.Add(1)
			go func() {
				defer loops.Done()
				w.fetchLoop(fetchCtx, q, slots, freed, jobs, wake)
			}()
		}
		go func() { loops.Wait(); close(jobs) }()
	}
	w.log.Info("jobfence: worker started", "queues", w.cfg.Queues, "kinds", w.reg.Kinds())
	return nil
}

// Stop stops claiming new jobs and waits for running ones to finish and
// their outcomes to be recorded. If ctx ends first, the remaining handlers'
// contexts are cancelled with ErrWorkerStopping and their jobs are put back
// to run again without spending an attempt; Stop then waits for those
// handlers to return. No job is lost: one whose outcome cannot be recorded
// keeps its claim until the lease expires and is then rescued.
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
			r.cancel(ErrWorkerStopping)
		}
		w.mu.Unlock()
		<-done
		stopErr = fmt.Errorf("jobfence: worker stop: %w; running jobs were interrupted and put back", ctx.Err())
	}
	close(w.finishCh)
	w.finishWG.Wait()
	w.bgCancel()
	w.bgWG.Wait()
	w.log.Info("jobfence: worker stopped", "stats", w.Stats())
	return stopErr
}

// fetchLoop claims jobs of queue q while slots has room; the queue's
// fetch loops share slots (its concurrency) and freed (a job ended).
func (w *Worker) fetchLoop(ctx context.Context, q string, slots, freed chan struct{}, out chan<- *queue.Job, wake <-chan struct{}) {
	defer w.fetchWG.Done()
	n := cap(slots)
	// Claiming a handful of jobs at a time wastes round trips when many
	// slots turn over: wait until a useful batch of slots is free.
	threshold := max(1, min(n, w.cfg.FetchLimit)/4)
	backoff := 50 * time.Millisecond
	for {
		free := n - len(slots)
		if free < threshold {
			select {
			case <-ctx.Done():
				return
			case <-freed:
				continue
			}
		}
		limit := min(free, w.cfg.FetchLimit)
		// Reserve the slots before claiming so side-by-side loops never
		// claim more than the queue's concurrency.
		reserved := 0
		for reserved < limit {
			select {
			case slots <- struct{}{}:
				reserved++
				continue
			default:
			}
			break
		}
		if reserved == 0 {
			continue
		}
		limit = reserved
		jobs, err := w.backend.Claim(ctx, queue.ClaimParams{Queue: q, Limit: limit, Lease: w.cfg.Lease, WorkerID: w.cfg.ID})
		if unused := limit - len(jobs); unused > 0 {
			for range unused {
				<-slots
			}
			// A sibling loop may be waiting for free slots.
			select {
			case freed <- struct{}{}:
			default:
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.stats.fetchErrors.Add(1)
			w.log.Error("jobfence: cannot claim jobs; retrying", "queue", q, "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		w.stats.claimed.Add(int64(len(jobs)))
		for _, j := range jobs {
			out <- j // never blocks: a slot is reserved for each job
		}
		if len(jobs) == limit {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-time.After(w.cfg.PollInterval):
		}
	}
}

// runner executes jobs until jobs is closed.
func (w *Worker) runner(jobs <-chan *queue.Job, release func()) {
	defer w.jobsWG.Done()
	for j := range jobs {
		w.execute(j)
		release()
	}
}

// track registers a running job; it reports false once Stop's deadline has
// passed, when the job must be put back instead of run.
func (w *Worker) track(r *running) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.interrupted {
		return false
	}
	w.inflight[r.lease.ID] = r
	return true
}

func (w *Worker) untrack(id int64) {
	w.mu.Lock()
	delete(w.inflight, id)
	w.mu.Unlock()
}
