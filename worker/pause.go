package worker

import (
	"slices"
	"sync"
)

// gate holds a queue's fetch loops back while the queue is paused. The
// paused set lives here, in memory, refreshed by the backend (see
// queue.QueueWatcher and queue.PauseWatcher), so a claim costs no extra round trip to ask.
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

// applyPaused makes paused the worker's set of paused queues, logging each
// queue that it pauses or resumes.
func (w *Worker) applyPaused(paused []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pausedSet = paused
	for q, f := range w.fetches {
		p := slices.Contains(paused, q)
		if !f.paused.set(p) {
			continue
		}
		if p {
			w.log.Info("jobfence: queue paused: claiming none of its jobs until it is resumed; running jobs finish", "queue", q)
		} else {
			w.log.Info("jobfence: queue resumed: claiming its jobs again", "queue", q)
		}
	}
}
