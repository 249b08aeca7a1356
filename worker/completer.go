package worker

import (
	"context"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// completer sends outcomes to the backend in batches: it takes whatever has
// queued up since the last round trip, so batches grow with load and an
// idle worker reports at once.
func (w *Worker) completer() {
	defer w.finishWG.Done()
	batch := make([]queue.Finish, 0, w.cfg.FinishBatch)
	for f := range w.finishCh {
		batch = append(batch[:0], f)
	drain:
		for len(batch) < w.cfg.FinishBatch {
			select {
			case f, ok := <-w.finishCh:
				if !ok {
					break drain
				}
				batch = append(batch, f)
			default:
				break drain
			}
		}
		w.flush(batch)
	}
}

// flush reports a batch, retrying while the backend is unreachable. It
// gives up only after the lease has surely run out: by then the jobs are
// the rescuer's, and an outcome would be stale anyway.
func (w *Worker) flush(batch []queue.Finish) {
	deadline := time.Now().Add(w.cfg.Lease + w.cfg.HeartbeatInterval)
	backoff := 50 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Lease)
		stale, err := w.backend.Finish(ctx, batch)
		cancel()
		if err == nil {
			completed := 0
			for _, f := range batch {
				if f.Outcome == queue.OutcomeComplete {
					completed++
				}
			}
			staleSet := make(map[int64]bool, len(stale))
			for _, l := range stale {
				staleSet[l.ID] = true
				w.log.Warn("jobfence: outcome rejected: stale fence (the job was claimed again by another owner)",
					"job", l.ID, "fence", l.Fence)
			}
			for _, f := range batch {
				if f.Outcome == queue.OutcomeComplete && staleSet[f.ID] {
					completed--
				}
			}
			w.stats.stale.Add(int64(len(stale)))
			w.stats.completed.Add(int64(completed))
			return
		}
		w.stats.finishErrors.Add(1)
		if time.Now().After(deadline) {
			w.log.Error("jobfence: cannot record outcomes; their jobs will be rescued when the lease expires",
				"jobs", len(batch), "err", err)
			return
		}
		w.log.Error("jobfence: cannot record outcomes; retrying", "jobs", len(batch), "err", err, "retry_in", backoff)
		time.Sleep(backoff)
		backoff = min(backoff*2, 2*time.Second)
	}
}
