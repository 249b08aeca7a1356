package worker

import (
	"context"
	"slices"
	"sync"

	"github.com/jobfence/jobfence/queue"
)

// gate holds a queue's fetch loops back while the queue is paused. The
// paused set lives here, in memory, refreshed by the backend (see
// queue.PauseWatcher), so a claim costs no extra round trip to ask.
type gate struct {
	mu sync.Mutex
	// open is closed while the queue runs; while it is paused it is a
	// fresh channel that resuming closes, releasing the waiting loops.
	open chan struct{}
}

func newGate() *gate {
	g := &gate{open: make(chan struct{})}
	close(g.open)
	return g
}

// wait returns nil while the queue runs, and otherwise a channel closed
// when it is resumed.
func (g *gate) wait() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		return nil
	default:
		return g.open
	}
}

// set pauses or resumes the queue and reports whether that changed it.
func (g *gate) set(paused bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
		if paused {
			g.open = make(chan struct{})
			return true
		}
	default:
		if !paused {
			close(g.open)
			return true
		}
	}
	return false
}

// watchPauses returns a gate per queue and, on a backend that can pause
// queues, keeps them up to date until ctx ends. The backend's first paused
// set, when it has one at hand, is applied before this returns, so a
// worker started while one of its queues is paused claims nothing from it.
func (w *Worker) watchPauses(ctx context.Context) map[string]*gate {
	gates := make(map[string]*gate, len(w.cfg.Queues))
	for q := range w.cfg.Queues {
		gates[q] = newGate()
	}
	pw, ok := w.backend.(queue.PauseWatcher)
	if !ok {
		return gates
	}
	ch, err := pw.WatchPaused(ctx, w.queueNames)
	if err != nil {
		w.log.Warn("jobfence: cannot watch for paused queues; pausing a queue will not stop this worker", "err", err)
		return gates
	}
	select {
	case paused := <-ch:
		w.applyPaused(gates, paused)
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
				w.applyPaused(gates, paused)
			}
		}
	}()
	return gates
}

// applyPaused makes paused the worker's set of paused queues, logging each
// queue that it pauses or resumes.
func (w *Worker) applyPaused(gates map[string]*gate, paused []string) {
	for q, g := range gates {
		p := slices.Contains(paused, q)
		if !g.set(p) {
			continue
		}
		if p {
			w.log.Info("jobfence: queue paused: claiming none of its jobs until it is resumed; running jobs finish", "queue", q)
		} else {
			w.log.Info("jobfence: queue resumed: claiming its jobs again", "queue", q)
		}
	}
}
