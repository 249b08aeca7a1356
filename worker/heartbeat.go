package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// heartbeatLoop extends the leases of running jobs, cancels the handlers
// of jobs the backend reports lost, and gives up on handlers that ignore
// their context's end (see Config.StuckGrace). A job whose lease runs out
// while heartbeats fail is cancelled by its own timer (leaseRanOut).
func (w *Worker) heartbeatLoop(ctx context.Context) {
	defer w.bgWG.Done()
	t := time.NewTicker(w.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.heartbeat(ctx)
	}
}

func (w *Worker) heartbeat(ctx context.Context) {
	w.mu.Lock()
	now := time.Now()
	var stuck []*running
	leases := make([]queue.Lease, 0, len(w.inflight))
	for _, r := range w.inflight {
		if w.isStuck(r, now) {
			stuck = append(stuck, r)
			continue
		}
		leases = append(leases, r.lease)
	}
	for r := range w.aside {
		if w.isStuck(r, now) {
			stuck = append(stuck, r)
		}
	}
	gaveUp := stuck[:0]
	for _, r := range stuck {
		if w.abandonRun(r, now, true) {
			gaveUp = append(gaveUp, r)
		}
	}
	w.mu.Unlock()
	w.endGivenUp(gaveUp, now)
	if len(leases) > 0 {
		sent := time.Now()
		hctx, cancel := context.WithTimeout(ctx, w.cfg.HeartbeatInterval)
		lost, err := w.backend.Heartbeat(hctx, leases, w.cfg.Lease)
		cancel()
		if err != nil {
			w.log.Error("jobfence: heartbeat failed; jobs are cancelled if their lease runs out first", "jobs", len(leases), "err", err)
		} else {
			lostSet := make(map[int64]bool, len(lost))
			for _, l := range lost {
				lostSet[l.ID] = true
			}
			w.mu.Lock()
			for _, l := range leases {
				r := w.inflight[l.ID]
				if r == nil || r.lease != l {
					continue
				}
				if lostSet[l.ID] {
					if !r.finishing.Load() {
						w.stats.lost.Add(1)
						w.logJob(r.ctx, slog.LevelWarn, "jobfence: job lost: cancelling its handler", r.job)
						w.cancelRun(r, ErrLeaseLost)
					}
					continue
				}
				r.leaseUntil = sent.Add(w.cfg.Lease)
			}
			w.mu.Unlock()
		}
	}
}

// leaseRanOut runs when r's lease, less the margin, has passed by this
// worker's clock. Unless a heartbeat pushed the lease on meanwhile (then
// it waits for the new end), the worker cannot prove it still holds the
// job: the handler is cancelled before another worker can claim the job,
// not at the next heartbeat tick.
func (w *Worker) leaseRanOut(r *running) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inflight[r.lease.ID] != r || r.finishing.Load() {
		return
	}
	if left := time.Until(r.leaseUntil) - w.leaseMargin; left > 0 {
		r.leaseTimer.Reset(left)
		return
	}
	w.stats.lost.Add(1)
	w.logJob(r.ctx, slog.LevelWarn, "jobfence: lease ran out without a heartbeat: cancelling handler", r.job)
	w.cancelRun(r, ErrLeaseLost)
}

// cancelLoop cancels the handlers of jobs cancelled while they ran.
func (w *Worker) cancelLoop(ctx context.Context, leases <-chan queue.Lease) {
	defer w.bgWG.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case l := <-leases:
			w.mu.Lock()
			// Only the claim that was cancelled: a late notification must
			// not cancel the job's next claim after a retry.
			if r := w.inflight[l.ID]; r != nil && r.lease.Fence == l.Fence {
				w.stats.lost.Add(1)
				w.cancelRun(r, ErrJobCancelled)
			}
			w.mu.Unlock()
		}
	}
}
