package kafkaqueue

import (
	"context"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// wakeTimer wakes a queue's workers when its earliest delayed message
// becomes ready.
type wakeTimer struct {
	t  *time.Timer
	at time.Time
}

// Wake returns a channel that receives a value when a message of queue may
// have become ready: one was fetched, a delay ran out, a partition or key
// was freed by a Finish, or the assignment changed.
func (b *Backend) Wake(ctx context.Context, q string) (<-chan struct{}, error) {
	if err := b.queueErr(q); err != nil {
		return nil, err
	}
	ch := make(chan struct{}, 1)
	// The first value goes in before ch is registered: once it is, notify
	// may fill ch's one slot at any moment, and a send after that would
	// block for ever.
	ch <- struct{}{}
	b.mu.Lock()
	if b.wakers[q] == nil {
		b.wakers[q] = make(map[chan struct{}]struct{})
	}
	b.wakers[q][ch] = struct{}{}
	b.mu.Unlock()
	context.AfterFunc(ctx, func() {
		b.mu.Lock()
		delete(b.wakers[q], ch)
		b.mu.Unlock()
	})
	return ch, nil
}

// Cancelled returns a channel that receives the leases of running jobs whose
// generation ended (their partitions were revoked), as soon as this member
// learns of it. A receiver that falls more than 4096 leases behind misses
// some; Heartbeat still reports them lost.
func (b *Backend) Cancelled(ctx context.Context) (<-chan queue.Lease, error) {
	ch := make(chan queue.Lease, 4096)
	b.mu.Lock()
	b.cancelled[ch] = struct{}{}
	b.mu.Unlock()
	context.AfterFunc(ctx, func() {
		b.mu.Lock()
		delete(b.cancelled, ch)
		b.mu.Unlock()
	})
	return ch, nil
}

// notify wakes the waiters of queue q. Callers hold b.mu.
func (b *Backend) notify(q string) {
	for ch := range b.wakers[q] {
		if len(ch) > 0 {
			continue // a wake-up is already pending
		}
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// armTimer wakes the waiters of q at at. Callers hold b.mu.
func (b *Backend) armTimer(q string, at time.Time) {
	if wt := b.timers[q]; wt != nil {
		if !wt.at.After(at) {
			return
		}
		wt.t.Stop()
	}
	wt := &wakeTimer{at: at}
	wt.t = time.AfterFunc(time.Until(at), func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.timers[q] == wt {
			delete(b.timers, q)
		}
		b.notify(q)
	})
	b.timers[q] = wt
}
