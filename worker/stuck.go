package worker

import (
	"errors"
	"log/slog"
	"time"
)

// ErrHandlerStuck is JobEnd.Err for a handler the worker gave up on: it
// kept running for Config.StuckGrace after its context ended.
var ErrHandlerStuck = errors.New("jobfence: handler kept running after its context ended; the worker gave up on it")

// The states of a running handler (running.state): the handler's return
// and the worker giving up on it race, and the first wins.
const (
	// runActive: the handler runs.
	runActive int32 = iota
	// runReturned: the handler returned before the worker gave up on it.
	runReturned
	// runStuck: given up on; its runner keeps its slot (the queue had
	// freed as many slots of stuck handlers as its concurrency).
	runStuck
	// runFreed: given up on; its slot and its place in jobsWG went to a
	// new runner.
	runFreed
	// runAbandoned: given up on by Stop, which let its place in jobsWG go.
	runAbandoned
)

// stopWait bounds how long Stop, its deadline passed, waits for the
// handlers it cancelled before giving up on them: long enough for a
// handler that heeds its context to return and have its job put back,
// short enough that Stop returns about when its caller asked.
const stopWait = time.Second

// cancelRun cancels r's handler with cause and notes when its context
// ended, if it had not already. w.mu is held.
func (w *Worker) cancelRun(r *running, cause error) {
	if now := time.Now(); r.ctxEnd.IsZero() || now.Before(r.ctxEnd) {
		r.ctxEnd = now
	}
	r.cancel(cause)
}

// isStuck reports whether r's handler has ignored the end of its context
// for StuckGrace. w.mu is held.
func (w *Worker) isStuck(r *running, now time.Time) bool {
	return !r.ctxEnd.IsZero() && now.Sub(r.ctxEnd) >= w.cfg.StuckGrace &&
		r.state.Load() == runActive && !r.finishing.Load()
}

// abandonRun gives up on r's handler unless it returned meanwhile, and reports
// whether it did. Its claim is no longer tracked, so heartbeats stop
// extending its lease and the rescuer takes the job back when the lease
// runs out. From the heartbeat, its slot goes to a new runner while its
// queue has freed fewer stuck handlers' slots than its concurrency; from
// Stop, its place in jobsWG is let go. The caller reports the JobEnd with
// endGivenUp once w.mu is released. w.mu is held.
func (w *Worker) abandonRun(r *running, now time.Time, fromHeartbeat bool) bool {
	to := runAbandoned
	var f *queueFetch
	if fromHeartbeat {
		to = runStuck
		// A removed queue (size 0) still lets one stuck handler's slot go,
		// so that its Remove is not held by a handler that ignores its
		// context.
		if f = r.fetch; f != nil && f.stuckFreed < max(int(f.size.Load()), 1) {
			to = runFreed
		}
	}
	if !r.state.CompareAndSwap(runActive, to) {
		return false
	}
	if w.inflight[r.lease.ID] == r {
		delete(w.inflight, r.lease.ID)
	}
	switch {
	case to == runStuck && !r.aside:
		w.aside[r], r.aside = struct{}{}, true
	case to != runStuck && r.aside:
		delete(w.aside, r)
		r.aside = false
	}
	if r.leaseTimer != nil {
		r.leaseTimer.Stop()
	}
	w.stats.stuck.Add(1)
	stuckNow := w.stats.stuckRunning.Add(1)
	w.logJob(r.ctx, slog.LevelError, "jobfence: handler still running after its context ended: gave up on it; "+
		"its lease is no longer extended, the rescuer takes the job back, and a late outcome is stale", r.job,
		slog.Duration("context_ended_ago", now.Sub(r.ctxEnd)), slog.Duration("running_for", now.Sub(r.tracked)),
		slog.Bool("slot_freed", to == runFreed), slog.Int64("stuck_running", stuckNow))
	switch to {
	case runFreed:
		f.stuckFreed++
		f.release()
		// The new runner takes the stuck one's count in jobsWG.
		go w.runner(f)
	case runAbandoned:
		w.jobsWG.Done()
	}
	return true
}

// endGivenUp reports the end of the handlers given up on: the worker will
// record nothing more of these attempts unless they return.
func (w *Worker) endGivenUp(rs []*running, now time.Time) {
	if w.cfg.Hooks.JobEnd == nil && w.series == nil {
		return
	}
	for _, r := range rs {
		if !r.endReported.CompareAndSwap(false, true) {
			continue
		}
		if w.series != nil {
			w.series.RecordAttempt(r.job, 0, false)
		}
		if w.cfg.Hooks.JobEnd != nil {
			w.cfg.Hooks.JobEnd(r.ctx, r.job, JobEnd{Lost: true, Stuck: true, Err: ErrHandlerStuck, Duration: now.Sub(r.tracked)})
		}
	}
}

// settle is called by r's handler's goroutine as soon as the handler
// returns. It reports whether the worker gave up on the handler first and
// let its slot go: then the runner must leave (another took its place),
// and the outcome is recorded at once (r.late) rather than by the
// completers, which may have ended with Stop.
func (w *Worker) settle(r *running) (leave bool) {
	if r.state.CompareAndSwap(runActive, runReturned) {
		return false
	}
	w.mu.Lock()
	w.stats.stuckRunning.Add(-1)
	switch r.state.Load() {
	case runStuck:
		// It kept its slot: its runner carries on.
		r.state.Store(runReturned)
		if r.aside {
			delete(w.aside, r)
			r.aside = false
		}
	case runFreed:
		r.fetch.stuckFreed--
		leave = true
	default:
		leave = true
	}
	took := time.Since(r.tracked)
	w.mu.Unlock()
	r.late = leave
	w.logJob(r.ctx, slog.LevelWarn, "jobfence: stuck handler returned after the worker gave up on it; its outcome is recorded under its old fence", r.job,
		slog.Duration("running_for", took))
	return leave
}

// recordLate records the outcome of a handler that returned after the
// worker gave up on it and let its slot go: the fence refuses it as stale
// if the job was claimed again meanwhile.
func (w *Worker) recordLate(p pending) {
	w.flush([]pending{p}, false)
	w.untrack(p.r)
}

// waitOrAbandon waits, once Stop's deadline has passed, for the handlers
// Stop cancelled to return: for StuckGrace, at most stopWait. It then gives
// up on those still running (their jobs are left to the rescuer), returns
// how many, once the runners it did not give up on have ended.
func (w *Worker) waitOrAbandon(done <-chan struct{}) (abandoned int) {
	t := time.NewTimer(min(w.cfg.StuckGrace, stopWait))
	defer t.Stop()
	select {
	case <-done:
		return 0
	case <-t.C:
	}
	now := time.Now()
	var gaveUp []*running
	w.mu.Lock()
	for _, r := range w.inflight {
		if w.abandonRun(r, now, false) {
			gaveUp = append(gaveUp, r)
		}
	}
	for r := range w.aside {
		if r.state.CompareAndSwap(runStuck, runAbandoned) {
			// Given up on already; it kept its slot, now let go.
			delete(w.aside, r)
			r.aside = false
			w.jobsWG.Done()
			abandoned++
		} else if w.abandonRun(r, now, false) {
			gaveUp = append(gaveUp, r)
		}
	}
	w.mu.Unlock()
	w.endGivenUp(gaveUp, now)
	<-done
	return abandoned + len(gaveUp)
}
