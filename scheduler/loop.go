package scheduler

import (
	"context"
	"errors"
	"time"
)

// loop sleeps until the earliest fire of the schedules by the host's clock
// and enqueues every due fire, reading the schedules table for changes
// every SyncInterval, when kicked, and at once after a fire was refused
// because its schedule changed. busy is when the previous tick (or Start)
// ended: fires that came due before it came while this instance was busy,
// not down.
func (s *Scheduler) loop(ctx context.Context, busy time.Time, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	timer := time.NewTimer(0)
	defer timer.Stop()
	nextSync := s.cfg.Now().Add(s.cfg.SyncInterval)
	resync := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-s.kick:
			resync = true
		case <-timer.C:
		}
		if now := s.cfg.Now(); resync || !now.Before(nextSync) {
			if s.sync(ctx, now, false) == nil {
				resync = false
			}
			nextSync = s.cfg.Now().Add(s.cfg.SyncInterval)
		}
		wake, refused := s.tick(ctx, stop, busy)
		busy = s.cfg.Now()
		wake = earlier(wake, nextSync)
		d := wake.Sub(busy)
		if refused {
			resync = true
			d = resyncDelay
		}
		d = max(0, min(d, maxSleep))
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(d)
	}
}

// tick enqueues the due fires of every schedule, until stop is closed or ctx
// ends, and returns when it should run again by the host's clock, and
// whether a fire was refused because its schedule changed in the table
// (paused, replaced or deleted): the loop then reads the table again at
// once. A fire that came due before busy (the end of the previous tick) is
// on time however late it now is, unless the schedule's last enqueue failed
// or the schedule was just loaded: it came while this instance was
// enqueuing other fires, and one slow schedule must not make the others
// miss fires. Only downtime, a stopped process or a failing enqueue makes
// fires missed.
func (s *Scheduler) tick(ctx context.Context, stop <-chan struct{}, busy time.Time) (time.Time, bool) {
	now := s.cfg.Now()
	wake := now.Add(maxSleep)
	refused := false
	for _, sc := range s.schedules {
		// Stop waits for one fire's enqueue, not for every due schedule's.
		select {
		case <-stop:
			return wake, refused
		default:
		}
		if ctx.Err() != nil {
			return wake, refused
		}
		if sc.paused {
			continue
		}
		if now.Before(sc.retryAt) {
			wake = earlier(wake, sc.retryAt)
			continue
		}
		if next := sc.spec.Next(sc.cursor); !next.IsZero() && !next.After(now) {
			b := busy
			if sc.failures > 0 || sc.fresh {
				b = time.Time{}
			}
			fires, m := sc.catchUp.due(sc.spec, sc.cursor, b, now)
			if len(fires) > 0 {
				if err := s.enqueue(ctx, sc, fires); err != nil {
					if ctx.Err() != nil {
						return wake, refused
					}
					if errors.Is(err, errChanged) {
						// The loop reads the schedule's row again and
						// handles these fires as the row now says.
						s.logger.Debug("scheduler: fire refused: the schedule changed in the table", "schedule", sc.name, "error", err)
						refused = true
						continue
					}
					sc.failures++
					backoff := min(time.Duration(1<<min(sc.failures-1, 5))*time.Second, maxBackoff)
					sc.retryAt = now.Add(backoff)
					s.logger.Error("scheduler: enqueue failed; retrying",
						"schedule", sc.name, "fire", fires[0], "retry_in", backoff, "error", err)
					wake = earlier(wake, sc.retryAt)
					continue
				}
			}
			// The drop is final once the cursor moves past the fires.
			s.logMissed(sc, m)
			sc.cursor, sc.failures = now, 0
		}
		sc.fresh = false
		if next := sc.spec.Next(sc.cursor); !next.IsZero() {
			wake = earlier(wake, next)
		}
	}
	return wake, refused
}

// logMissed logs the missed fires of sc that its catch-up policy drops.
func (s *Scheduler) logMissed(sc *schedule, m missed) {
	if !m.beforeWindow.IsZero() {
		s.logger.Warn("scheduler: missed fires older than the catch-up window not enqueued",
			"schedule", sc.name, "first", m.beforeWindow, "until", m.windowEnd, "window", sc.catchUp.window)
		if s.cfg.OnMissed != nil {
			n, last := 0, m.beforeWindow
			sc.spec.firesIn(m.beforeWindow.Add(-time.Nanosecond), m.windowEnd, func(t time.Time) bool {
				n, last = n+1, t
				return n < MaxCountedMissed
			})
			s.cfg.OnMissed(Missed{Schedule: sc.name, Fires: n, First: m.beforeWindow, Last: last, BeforeWindow: true})
		}
	}
	if m.n > 0 {
		s.logger.Warn("scheduler: missed fires not enqueued",
			"schedule", sc.name, "policy", sc.catchUp.policy.String(), "missed", m.n, "first", m.first, "last", m.last, "grace", sc.catchUp.grace)
		if s.cfg.OnMissed != nil {
			s.cfg.OnMissed(Missed{Schedule: sc.name, Fires: m.n, First: m.first, Last: m.last})
		}
	}
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
