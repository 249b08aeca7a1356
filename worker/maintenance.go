package worker

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/jobfence/jobfence/queue"
)

const (
	rescueBatch = 100
	pruneBatch  = 1000
)

// maintenanceLoop rescues expired jobs and prunes old final ones, and,
// with a backend that keeps finished jobs in partitions
// (queue.FinishedMaintainer), creates and drops those as it starts and
// before each prune. With each rescue it ends the database sessions left
// holding the queue's locks by a client that stopped mid-batch
// (queue.SessionReaper), and releases the workflow dependents that a
// stopped client left to release (queue.DependentReleaser).
// Every worker runs it; the backend's SKIP LOCKED batches and bounded DDL
// keep instances off each other's rows and locks, so there is no leader
// to elect or lose.
func (w *Worker) maintenanceLoop(ctx context.Context, m queue.Maintainer) {
	defer w.bgWG.Done()
	// Spread instances that started together.
	jitter := func(d time.Duration) time.Duration { return d/2 + rand.N(d) }
	rescue := time.NewTimer(jitter(w.cfg.RescueInterval))
	prune := time.NewTimer(jitter(w.cfg.PruneInterval))
	defer rescue.Stop()
	defer prune.Stop()
	// The per-minute series are written a few seconds after each minute
	// (instances spread over them), so that a minute's row gets most of
	// its counts at once.
	var flush *time.Timer
	var flushC <-chan time.Time
	if w.series != nil {
		flush = time.NewTimer(untilNextMinute(time.Now()))
		defer flush.Stop()
		flushC = flush.C
	}
	partitions := true // until the backend says the retention is too short
	// Make the finished-jobs partitions now rather than a prune interval
	// from now: until they exist, completions leave their jobs in the jobs
	// table, where the pruner must delete them row by row.
	w.maintainFinished(ctx, m, &partitions)
	for {
		select {
		case <-ctx.Done():
			return
		case <-rescue.C:
			w.drain(ctx, "rescue", rescueBatch, &w.stats.rescued, func(ctx context.Context) (int, error) {
				n, err := m.Rescue(ctx, queue.RescueParams{Limit: rescueBatch, Backoff: w.retryDelay})
				if n > 0 && w.cfg.Hooks.Rescue != nil {
					w.cfg.Hooks.Rescue(ctx, n)
				}
				return n, err
			})
			w.endStalledSessions(ctx, m)
			w.releaseLeftDependents(ctx, m)
			rescue.Reset(jitter(w.cfg.RescueInterval))
		case <-prune.C:
			w.maintainFinished(ctx, m, &partitions)
			w.drain(ctx, "prune", pruneBatch, &w.stats.pruned, func(ctx context.Context) (int, error) {
				if sp, ok := m.(queue.StatePruner); ok {
					return sp.PruneStates(ctx, w.cfg.RetentionByState, pruneBatch)
				}
				return m.Prune(ctx, w.cfg.RetentionByState.Longest(), pruneBatch)
			})
			w.pruneSeries(ctx)
			prune.Reset(jitter(w.cfg.PruneInterval))
		case <-flushC:
			if err := w.series.FlushSeries(ctx); err != nil {
				w.maintenanceFailed(ctx, "series", err)
			}
			flush.Reset(untilNextMinute(time.Now()))
		}
	}
}

// untilNextMinute is how long from now until a moment in the first five
// seconds of the next minute, picked at random: instances spread their
// flushes of the per-minute series over those seconds, each after most
// of the minute's counts.
func untilNextMinute(now time.Time) time.Duration {
	return now.Truncate(time.Minute).Add(time.Minute).Sub(now) + rand.N(5*time.Second)
}

// pruneSeries deletes the backend's per-minute series older than the
// longest retention, if it keeps them (queue.SeriesRecorder).
func (w *Worker) pruneSeries(ctx context.Context) {
	if w.series == nil {
		return
	}
	if _, err := w.series.PruneSeries(ctx, w.cfg.RetentionByState.Longest()); err != nil {
		w.maintenanceFailed(ctx, "prune series", err)
	}
}

// endStalledSessions runs the backend's queue.SessionReaper once, if it
// has one: the sessions it ends are logged by the backend, counted in
// Stats.EndedSessions and reported to Hooks.EndedSessions.
func (w *Worker) endStalledSessions(ctx context.Context, m queue.Maintainer) {
	r, ok := m.(queue.SessionReaper)
	if !ok {
		return
	}
	n := w.maintainOnce(ctx, "stalled sessions", &w.stats.endedSessions, func(ctx context.Context) (int, error) {
		return r.EndStalledSessions(ctx)
	})
	if n > 0 && w.cfg.Hooks.EndedSessions != nil {
		w.cfg.Hooks.EndedSessions(ctx, n)
	}
}

// releaseLeftDependents runs the backend's queue.DependentReleaser once
// for every task, if it has one: it releases the dependents that a client
// which completed their workflow task left to release when it stopped.
// They are counted in Stats.ReleasedRanges and logged.
func (w *Worker) releaseLeftDependents(ctx context.Context, m queue.Maintainer) {
	r, ok := m.(queue.DependentReleaser)
	if !ok {
		return
	}
	n := w.maintainOnce(ctx, "release dependents", &w.stats.releasedRanges, func(ctx context.Context) (int, error) {
		return r.ReleaseDependents(ctx, nil)
	})
	if n > 0 {
		w.log.Info("jobfence: released the dependents that a stopped client left to release", "ranges", n)
	}
}

// maintainOnce runs one maintenance task once: it counts what the task did
// in counter, even when it failed part way, logs its failure (unless the
// worker is stopping) for the next pass to try again, and returns the
// count.
func (w *Worker) maintainOnce(ctx context.Context, task string, counter interface{ Add(int64) int64 }, run func(context.Context) (int, error)) int {
	n, err := run(ctx)
	counter.Add(int64(n))
	if err != nil {
		w.maintenanceFailed(ctx, task, err)
	}
	return n
}

// maintenanceFailed logs a maintenance task's failure, unless the worker
// is stopping (ctx ended): its next pass tries again.
func (w *Worker) maintenanceFailed(ctx context.Context, task string, err error) {
	if ctx.Err() == nil {
		w.log.Warn("jobfence: maintenance failed; will try again", "task", task, "err", err)
	}
}

// maintainFinished runs the backend's partition maintenance once, if it
// has one and the retention allows it (*on): a retention below
// queue.MinFinishedRetention is logged once, and finished jobs then stay
// where Prune deletes them.
func (w *Worker) maintainFinished(ctx context.Context, m queue.Maintainer, on *bool) {
	fm, ok := m.(queue.FinishedMaintainer)
	if !ok || !*on {
		return
	}
	// Only completed jobs move to the partitions.
	res, err := fm.MaintainFinished(ctx, w.cfg.RetentionByState.Completed)
	switch {
	case errors.Is(err, queue.ErrRetentionTooShort):
		*on = false
		w.log.Info("jobfence: finished jobs stay in the jobs table, pruned row by row", "err", err)
	case err != nil:
		w.maintenanceFailed(ctx, "finished partitions", err)
	case res.Created > 0 || res.Dropped > 0:
		w.log.Info("jobfence: maintenance", "task", "finished partitions", "created", res.Created, "dropped", res.Dropped,
			"partitions", res.Partitions, "until", res.Until)
	}
}

// drain repeats a bounded maintenance step while it finds full batches.
func (w *Worker) drain(ctx context.Context, what string, batch int, counter interface{ Add(int64) int64 }, step func(context.Context) (int, error)) {
	for ctx.Err() == nil {
		n, err := step(ctx)
		if err != nil {
			w.maintenanceFailed(ctx, what, err)
			return
		}
		counter.Add(int64(n))
		if n > 0 {
			w.log.Info("jobfence: maintenance", "task", what, "jobs", n)
		}
		if n < batch {
			return
		}
	}
}

// promoteBatch bounds one Promote call; a full batch is followed by
// another at once.
const promoteBatch = 1000

// promoteLoop makes jobs whose time has come ready to claim, every
// PromoteInterval. Every worker runs it; the backend's SKIP LOCKED
// batches keep instances off each other's rows.
func (w *Worker) promoteLoop(ctx context.Context, p queue.Promoter) {
	defer w.bgWG.Done()
	// Instances that started together spread over the interval.
	t := time.NewTimer(rand.N(w.cfg.PromoteInterval))
	defer t.Stop()
	wait := w.cfg.PromoteInterval
	var signalled <-chan struct{}
	if sw, ok := w.backend.(SignalWaker); ok {
		if ch, err := sw.Signalled(ctx); err == nil {
			signalled = ch
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-signalled:
		}
		if err := w.promote(ctx, p); err != nil {
			// An unreachable database is retried less and less often
			// (5s at most), as the fetch loops do, not logged every
			// interval.
			wait = min(2*wait, max(5*time.Second, w.cfg.PromoteInterval))
			if ctx.Err() == nil {
				w.log.Warn("jobfence: promoting due jobs failed; will try again", "err", err, "retry_in", wait)
			}
		} else {
			wait = w.cfg.PromoteInterval
		}
		t.Reset(wait)
	}
}

// promote promotes due jobs in batches until a batch is not full, then
// hands free limit slots to waiting jobs (queue.Granter), and wakes this
// worker's fetch loops of the queues that got jobs.
func (w *Worker) promote(ctx context.Context, p queue.Promoter) error {
	for ctx.Err() == nil {
		byQueue, err := p.Promote(ctx, promoteBatch)
		if err != nil {
			return err
		}
		n := 0
		for q, k := range byQueue {
			n += k
			w.pokeQueue(q)
		}
		w.stats.promoted.Add(int64(n))
		if n < promoteBatch {
			break
		}
	}
	if g, ok := p.(queue.Granter); ok && ctx.Err() == nil {
		byQueue, err := g.GrantWaiting(ctx, promoteBatch)
		if err != nil {
			return err
		}
		w.poke(byQueue)
	}
	return nil
}

// poke wakes this worker's fetch loops of the queues that got jobs.
func (w *Worker) poke(byQueue map[string]int) {
	for q, k := range byQueue {
		if k > 0 {
			w.pokeQueue(q)
		}
	}
}
