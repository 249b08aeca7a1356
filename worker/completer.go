package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// completer sends outcomes to the backend in batches: it takes whatever has
// queued up since the last round trip, so batches grow with load and an
// idle worker reports at once.
func (w *Worker) completer() {
	defer w.finishWG.Done()
	batch := make([]pending, 0, w.cfg.FinishBatch)
	for p := range w.finishCh {
		batch = append(batch[:0], p)
	drain:
		for len(batch) < w.cfg.FinishBatch {
			select {
			case p, ok := <-w.finishCh:
				if !ok {
					break drain
				}
				batch = append(batch, p)
			default:
				break drain
			}
		}
		w.flush(batch)
		// Until now the jobs stayed tracked, so heartbeats kept their
		// leases while the outcomes waited.
		for _, p := range batch {
			w.untrack(p.r)
		}
	}
}

// flush reports a batch, retrying while the backend is unreachable. It
// gives up after the lease has surely run out (the jobs are the rescuer's by
// then, and an outcome would be stale anyway), or after one last try once
// Stop's deadline has passed.
func (w *Worker) flush(batch []pending) {
	fs := make([]queue.Finish, len(batch))
	for i, p := range batch {
		fs[i] = p.f
	}
	deadline := time.Now().Add(w.cfg.Lease + w.cfg.HeartbeatInterval)
	backoff := 50 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Lease)
		sent := time.Now()
		stale, err := w.backend.Finish(ctx, fs)
		cancel()
		if w.cfg.Hooks.Finish != nil {
			w.cfg.Hooks.Finish(context.Background(), FinishInfo{Jobs: len(fs), Stale: len(stale), Duration: time.Since(sent), Err: err})
		}
		if err == nil {
			w.count(batch, fs, stale)
			return
		}
		w.stats.finishErrors.Add(1)
		giveUp := false
		select {
		case <-w.giveUp:
			giveUp = true
		default:
			giveUp = time.Now().After(deadline)
		}
		if giveUp {
			w.log.Error("jobfence: cannot record outcomes; their jobs will be rescued when the lease expires",
				"jobs", len(fs), "err", err)
			for _, p := range batch {
				w.ended(p.r, JobEnd{Outcome: p.outcome, Lost: true})
			}
			return
		}
		w.log.Error("jobfence: cannot record outcomes; retrying", "jobs", len(fs), "err", err, "retry_in", backoff)
		select {
		case <-time.After(backoff):
		case <-w.giveUp:
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

// count updates the counters for a recorded batch and reports each job's
// end.
func (w *Worker) count(batch []pending, fs []queue.Finish, stale []queue.Lease) {
	var staleSet map[queue.Lease]bool
	if len(stale) > 0 {
		staleSet = make(map[queue.Lease]bool, len(stale))
		for _, l := range stale {
			staleSet[l] = true
		}
	}
	completed := 0
	for i, f := range fs {
		p := batch[i]
		if staleSet[f.Lease] {
			w.logJob(p.r.ctx, slog.LevelWarn, "jobfence: outcome rejected: stale fence (the job was claimed again by another owner)", p.r.job)
		} else if f.Outcome == queue.OutcomeComplete {
			completed++
		}
		w.ended(p.r, JobEnd{Outcome: p.outcome, Stale: staleSet[f.Lease]})
	}
	w.stats.stale.Add(int64(len(stale)))
	w.stats.completed.Add(int64(completed))
}
