package worker

import (
	"context"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// instance is this worker's report to a queue.Registrar.
func (w *Worker) instance() queue.Instance {
	w.mu.Lock()
	running, queues := len(w.inflight), w.queueNames
	w.mu.Unlock()
	s := w.stats.snapshot()
	return queue.Instance{
		ID: w.cfg.ID, Host: w.host, PID: w.pid,
		Queues:  queues,
		Running: running, Completed: s.Completed, Stale: s.Stale, Lost: s.Lost,
		StartedAt: w.startedAt, Interval: w.cfg.HeartbeatInterval,
	}
}

// registryLoop reports this worker to r at once, then at every
// heartbeat interval and whenever the queues it works change, so `jobfence workers list` and the dashboard show it.
// It runs beside the heartbeats, not in their loop: a slow registry must
// not delay the lease extensions.
func (w *Worker) registryLoop(ctx context.Context, r queue.Registrar) {
	defer w.bgWG.Done()
	t := time.NewTicker(w.cfg.HeartbeatInterval)
	defer t.Stop()
	failing := false
	for {
		rctx, cancel := context.WithTimeout(ctx, w.cfg.HeartbeatInterval)
		err := r.Register(rctx, w.instance())
		cancel()
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			w.log.Warn("jobfence: cannot report this worker to the registry; retrying at each heartbeat", "err", err)
			failing = true
		case err == nil && failing:
			w.log.Info("jobfence: reporting this worker to the registry again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.registryKick:
			// The queues worked changed: report them now.
		}
	}
}

// deregister removes this worker from r once it has stopped; a worker that
// cannot is aged out of the registry instead.
func (w *Worker) deregister(ctx context.Context, r queue.Registrar) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := r.Deregister(ctx, w.cfg.ID); err != nil {
		w.log.Warn("jobfence: cannot remove this worker from the registry; it ages out", "err", err)
	}
}
