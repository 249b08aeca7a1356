package worker

import (
	"context"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// refillMinWait bounds how often the refill loop grants: at most one
// grant per refillMinWait, however many rate slots free in between (a
// grant then serves every slot free by its time).
const refillMinWait = 5 * time.Millisecond

// refillLoop grants a rate-limited partition's waiting jobs when its
// window frees a slot (queue.RefillGranter), so that a rate of N per
// period sustains about N, rather than waiting for the next grant pass
// (PromoteInterval) or outcome. It sleeps until the earliest refill the
// backend knows of, or until a grant learns of an earlier one; with none
// known, until then. A failed grant is retried at the next refill, no
// sooner than PromoteInterval later, and the grant pass catches what it
// missed.
func (w *Worker) refillLoop(ctx context.Context, g queue.RefillGranter) {
	defer w.bgWG.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		byQueue, next, err := g.GrantRefilled(ctx)
		if ctx.Err() != nil {
			return
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), refillMinWait)
		}
		if err != nil {
			w.stats.refillErrors.Add(1)
			w.log.Warn("jobfence: granting rate-limited jobs whose window freed a slot failed; the grant pass tries again", "err", err)
			wait = max(wait, w.cfg.PromoteInterval)
		} else {
			for _, n := range byQueue {
				w.stats.refilled.Add(int64(n))
			}
			w.poke(byQueue)
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-g.Refills():
			// An earlier refill: look at once (the backend knows it).
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
			if err != nil {
				// After a failure, not before PromoteInterval.
				select {
				case <-ctx.Done():
					return
				case <-time.After(w.cfg.PromoteInterval):
				}
			}
		}
	}
}
