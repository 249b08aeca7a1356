package worker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/jobfence/jobfence/queue"
)

// Errors of the run-time queue changes (AddQueue, SetQueue, RemoveQueue);
// test for them with errors.Is. A bad name or concurrency wraps
// queue.ErrNoQueueName or queue.ErrBadConcurrency.
var (
	// ErrQueueWorked reports AddQueue of a queue the worker works
	// already: change its concurrency with SetQueue.
	ErrQueueWorked = errors.New("jobfence: queue already worked here")
	// ErrQueueNotWorked reports SetQueue or RemoveQueue of a queue the
	// worker does not work.
	ErrQueueNotWorked = errors.New("jobfence: queue not worked here")
)

// AddQueue starts working queue name with concurrency slots in this
// worker alone, at once if it runs (claims begin within a poll, sooner
// with a wake-up), else from Start. Its handlers must be registered: a
// job of a kind without one goes back to the queue without spending an
// attempt, for an instance that knows the kind (see Registry). A queue
// the worker works already is refused (ErrQueueWorked); an empty name or
// a concurrency outside 1..queue.MaxConcurrency is refused with an error
// that says so.
//
// A local change overrides the fleet's stored setting of the queue
// (queue.QueueWatcher) until that setting next changes; a new worker
// (a restart) follows the stored setting again.
func (w *Worker) AddQueue(name string, concurrency int) error {
	if err := queue.CheckQueue(name, concurrency); err != nil {
		return fmt.Errorf("jobfence: worker: add queue: %w", err)
	}
	w.qmu.Lock()
	defer w.qmu.Unlock()
	if n := w.effective(name); n > 0 {
		return fmt.Errorf("jobfence: worker: add queue %q: %w (concurrency %d); set its concurrency instead", name, ErrQueueWorked, n)
	}
	w.local[name], w.override[name] = concurrency, true
	w.applyQueue(name)
	return nil
}

// SetQueue changes the concurrency of queue name, which the worker
// works, in this worker alone. Growing lets it claim more at once;
// shrinking cancels no running job: the queue claims nothing until fewer
// than concurrency of its jobs run. A queue the worker does not work is
// refused (ErrQueueNotWorked; AddQueue starts one), as are an empty name
// and a concurrency outside 1..queue.MaxConcurrency. Like AddQueue it
// overrides the queue's stored setting until that next changes.
func (w *Worker) SetQueue(name string, concurrency int) error {
	if err := queue.CheckQueue(name, concurrency); err != nil {
		return fmt.Errorf("jobfence: worker: set queue: %w", err)
	}
	w.qmu.Lock()
	defer w.qmu.Unlock()
	if w.effective(name) == 0 {
		return fmt.Errorf("jobfence: worker: set queue %q: %w; add it instead", name, ErrQueueNotWorked)
	}
	w.local[name], w.override[name] = concurrency, true
	w.applyQueue(name)
	return nil
}

// RemoveQueue stops working queue name in this worker alone and drains
// it: the worker claims none of its jobs from now on, lets the running
// ones finish (each within its timeout; a handler that ignores its
// context is given up on after Config.StuckGrace, as always), and stops
// reporting the queue to the registry. It returns once they have ended,
// or with an error wrapping ctx's cause when ctx ends first: the drain
// goes on, and nothing more is claimed. A queue the worker does not work
// is refused (ErrQueueNotWorked), as is an empty name. Like AddQueue it
// overrides the queue's stored setting until that next changes.
func (w *Worker) RemoveQueue(ctx context.Context, name string) error {
	if name == "" {
		return fmt.Errorf("jobfence: worker: remove queue: %w", queue.ErrNoQueueName)
	}
	w.qmu.Lock()
	if w.effective(name) == 0 {
		w.qmu.Unlock()
		return fmt.Errorf("jobfence: worker: remove queue %q: %w", name, ErrQueueNotWorked)
	}
	w.local[name], w.override[name] = 0, true
	w.applyQueue(name)
	w.mu.Lock()
	f := w.fetches[name]
	w.mu.Unlock()
	w.qmu.Unlock()
	if f == nil {
		return nil
	}
	if err := f.waitEmpty(ctx); err != nil {
		return fmt.Errorf("jobfence: worker: remove queue %q: its running jobs had not ended when ctx ended; they finish in the background and nothing more is claimed: %w", name, err)
	}
	return nil
}

// Queues returns the queues the worker works, or will from Start, with
// their concurrency: its configuration as its local calls (AddQueue,
// SetQueue, RemoveQueue) and the fleet's stored settings changed it.
func (w *Worker) Queues() map[string]int {
	w.qmu.Lock()
	defer w.qmu.Unlock()
	m := map[string]int{}
	for _, q := range w.known() {
		if n := w.effective(q); n > 0 {
			m[q] = n
		}
	}
	return m
}

// known returns every queue that the configuration, a local call or a
// stored setting names, sorted. w.qmu is held.
func (w *Worker) known() []string {
	set := maps.Clone(w.local)
	for q := range w.stored {
		set[q] = 0
	}
	return slices.Sorted(maps.Keys(set))
}

// effective is the concurrency the worker gives queue q: its own (the
// configuration's, as local calls changed it) unless the queue's stored
// setting changed after the last local call; then a stored Concurrency
// replaces it, RunStopped stops the queue, and RunStarted starts it in a
// worker that opted in (Config.FleetQueues). 0: not worked. w.qmu is held.
func (w *Worker) effective(q string) int {
	n := w.local[q]
	s, ok := w.stored[q]
	if !ok || w.override[q] {
		return n
	}
	switch s.Run {
	case queue.RunStopped:
		return 0
	case queue.RunStarted:
		if n == 0 && w.cfg.FleetQueues {
			n = s.Concurrency
		}
	}
	if n > 0 && s.Concurrency > 0 {
		n = s.Concurrency
	}
	return n
}

// applyQueue makes queue q run at its effective concurrency in a started
// worker: it starts it (subscribing to its wake-ups first, outside w.mu),
// resizes it, or removes it (size 0: it claims nothing, and its running
// jobs finish). w.qmu is held.
func (w *Worker) applyQueue(q string) {
	n := w.effective(q)
	w.mu.Lock()
	if !w.started || w.stopped {
		w.mu.Unlock()
		return
	}
	f := w.fetches[q]
	cur := 0
	if f != nil && f.listed {
		cur = int(f.size.Load())
	}
	w.mu.Unlock()
	if n == cur {
		return
	}
	var wake <-chan struct{}
	var stop context.CancelFunc
	if n > 0 && cur == 0 {
		wake, stop = w.subscribeWake(q)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		if stop != nil {
			stop()
		}
		return
	}
	if n == 0 {
		w.removeLocked(f)
		w.log.Info("jobfence: queue removed: claiming none of its jobs; running jobs finish", "queue", q)
		return
	}
	w.startQueueLocked(q, n, wake, stop)
	if cur == 0 {
		w.log.Info("jobfence: queue added", "queue", q, "concurrency", n)
	} else {
		w.log.Info("jobfence: queue resized", "queue", q, "concurrency", n, "was", cur)
	}
}

// subscribeWake subscribes to queue q's wake-ups on a backend that has
// them, until the returned stop (or the worker's background context).
func (w *Worker) subscribeWake(q string) (<-chan struct{}, context.CancelFunc) {
	ctx, stop := context.WithCancel(w.bgCtx)
	wk, ok := w.backend.(queue.Waker)
	if !ok {
		return nil, stop
	}
	ch, err := wk.Wake(ctx, q)
	if err != nil {
		w.log.Warn("jobfence: no wake-ups; polling", "queue", q, "err", err)
	}
	return ch, stop
}

// startQueueLocked starts queue q with n slots, or resizes it to n if it
// runs, or starts it again if it was removed (its fetch loops and
// runners wait for that). wake and stop are its new wake-up subscription
// (nil when it keeps its own). w.mu is held and the worker is not
// stopped.
func (w *Worker) startQueueLocked(q string, n int, wake <-chan struct{}, stop context.CancelFunc) {
	f := w.fetches[q]
	fresh := f == nil
	if fresh {
		g := newGate()
		g.set(slices.Contains(w.pausedSet, q))
		f = newQueueFetch(q, n, g, wake)
		w.fetches[q] = f
	} else if stop != nil {
		f.setWake(wake)
	}
	if stop != nil {
		f.stopWake = stop
	}
	f.listed = true
	w.resizeLocked(f, n)
	if fresh {
		// Its loops are counted in loopsWG before this waits: the
		// channel is closed once they have stopped (Stop).
		go func() { f.loopsWG.Wait(); f.closeOut() }()
	}
	w.listQueuesLocked()
}

// removeLocked stops queue f: its size drops to 0, so it claims nothing
// and its runners leave as its running jobs end; its wake-ups stop and it
// is no longer reported. w.mu is held.
func (w *Worker) removeLocked(f *queueFetch) {
	if f == nil {
		return
	}
	w.resizeLocked(f, 0)
	f.listed = false
	if f.stopWake != nil {
		f.stopWake()
		f.stopWake = nil
	}
	w.listQueuesLocked()
}

// resizeLocked makes n the concurrency of f: runners first, so that
// there is a runner for every slot that may be taken, then the size,
// then fetch loops up to Config.Fetchers (no more than the size). A
// smaller size cancels nothing: spare runners leave as their jobs end.
// w.mu is held and the worker is not stopped.
func (w *Worker) resizeLocked(f *queueFetch, n int) {
	f.resize.Lock()
	for f.runners.Load() < int64(n) {
		f.runners.Add(1)
		w.jobsWG.Add(1)
		// Long-lived runners, one per slot, keep their grown stacks (see
		// runnerStackReserve): a goroutine per job would grow a fresh
		// stack for every job.
		go w.runner(f)
	}
	f.size.Store(int64(n))
	f.resize.Unlock()
	for f.loops < min(w.cfg.Fetchers, n) {
		helper := f.loops > 0
		f.loops++
		f.loopsWG.Add(1)
		w.fetchWG.Add(1)
		go func() {
			defer f.loopsWG.Done()
			w.fetchLoop(w.fetchCtx, f, helper)
		}()
	}
	f.signal()
}

// leaveIfSpare reports, after a runner's job, that the queue has more
// runners than its size (it shrank): the runner leaves, counted out.
func (f *queueFetch) leaveIfSpare() bool {
	if f.runners.Load() <= f.size.Load() {
		return false
	}
	f.resize.Lock()
	defer f.resize.Unlock()
	if f.runners.Load() <= f.size.Load() {
		return false
	}
	f.runners.Add(-1)
	return true
}

// listQueuesLocked records the queues worked, for the registry, and has
// the registry told at once. w.mu is held.
func (w *Worker) listQueuesLocked() {
	var names []string
	for q, f := range w.fetches {
		if f.listed {
			names = append(names, q)
		}
	}
	slices.Sort(names)
	w.queueNames = names
	select {
	case w.registryKick <- struct{}{}:
	default:
	}
}

// pokeQueue wakes this worker's fetch loops of queue q, if it has them:
// its promoter made jobs of q ready.
func (w *Worker) pokeQueue(q string) {
	w.mu.Lock()
	f := w.fetches[q]
	w.mu.Unlock()
	if f != nil {
		f.pokeNow()
	}
}

// applyStored makes settings the fleet's stored queue settings: a queue
// whose setting changed forgets its local override, the pauses are
// applied, and every queue is brought to its effective concurrency.
// w.qmu is not held.
func (w *Worker) applyStored(settings []queue.QueueSetting) {
	w.qmu.Lock()
	defer w.qmu.Unlock()
	next := make(map[string]queue.QueueSetting, len(settings))
	var paused []string
	for _, s := range settings {
		next[s.Name] = s
		if s.Paused {
			paused = append(paused, s.Name)
		}
	}
	for q := range w.override {
		if w.stored[q] != next[q] {
			delete(w.override, q)
		}
	}
	w.stored = next
	w.applyPaused(paused)
	for _, q := range w.known() {
		w.applyQueue(q)
	}
}

// watchQueues follows the fleet's stored queue settings on a backend
// that stores them (queue.QueueWatcher), or the paused queues on one that
// only pauses them (queue.PauseWatcher: the queues the worker starts
// with). Before it returns, the settings already known are recorded in
// w.stored and w.pausedSet, so that Start starts the queues as they say;
// later ones are applied as they come (applyStored, applyPaused). w.qmu
// and w.mu are held.
func (w *Worker) watchQueues(ctx context.Context) {
	if qw, ok := w.backend.(queue.QueueWatcher); ok {
		ch, err := qw.WatchQueues(ctx)
		if err != nil {
			w.log.Warn("jobfence: cannot watch the stored queue settings; pausing, resizing, adding or removing a queue for the fleet will not reach this worker", "err", err)
			return
		}
		select {
		case settings := <-ch:
			for _, s := range settings {
				w.stored[s.Name] = s
				if s.Paused {
					w.pausedSet = append(w.pausedSet, s.Name)
				}
			}
		default:
		}
		w.bgWG.Add(1)
		go func() {
			defer w.bgWG.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case settings := <-ch:
					w.applyStored(settings)
				}
			}
		}()
		return
	}
	pw, ok := w.backend.(queue.PauseWatcher)
	if !ok {
		return
	}
	ch, err := pw.WatchPaused(ctx, slices.Sorted(maps.Keys(w.local)))
	if err != nil {
		w.log.Warn("jobfence: cannot watch for paused queues; pausing a queue will not stop this worker", "err", err)
		return
	}
	select {
	case paused := <-ch:
		w.pausedSet = paused
	default:
	}
	w.bgWG.Add(1)
	go func() {
		defer w.bgWG.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case paused := <-ch:
				w.applyPaused(paused)
			}
		}
	}()
}
