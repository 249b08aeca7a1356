package pgqueue

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"
)

// DefaultPausePollInterval is the default of Config.PausePollInterval.
const DefaultPausePollInterval = time.Second

// pauseSafetyPolls is how many PausePollIntervals apart a watcher whose
// LISTEN is up still reads the paused set: a connection that died without
// a word (a silent network partition) delivers nothing and reports no
// error, and this bounds how long a pause can go unnoticed then.
const pauseSafetyPolls = 30

// pausedSQL reads which of the queues $1 are paused: a primary-key probe
// per queue of a table with a row per paused-or-resumed queue.
const pausedSQL = `SELECT coalesce(array_agg(name ORDER BY name), '{}') FROM jobfence_queues WHERE name = ANY($1) AND paused_at IS NOT NULL`

// PausedQueues returns which of queues are paused, by name.
func (c *Client) PausedQueues(ctx context.Context, queues []string) ([]string, error) {
	var paused []string
	if err := c.pool.QueryRow(ctx, pausedSQL, queues).Scan(&paused); err != nil {
		return nil, fmt.Errorf("pgqueue: paused queues: %w", err)
	}
	return paused, nil
}

// WatchPaused implements queue.PauseWatcher. It reads the paused set
// before it returns (unless the database does not answer within a few
// seconds), so a worker never claims from a queue paused before it
// started. Afterwards it re-reads the set when a PauseQueue or ResumeQueue
// of one of queues is notified (LISTEN on the client's one LISTEN
// connection, as Wake), when that LISTEN is back after a lost connection,
// and at least every 30 PausePollIntervals. Without LISTEN
// (Config.PollOnly, or while the connection is down) it polls every
// PausePollInterval: one small query per worker, whatever its number of
// queues. A value is sent only when the set differs from the last one
// sent.
func (c *Client) WatchPaused(ctx context.Context, queues []string) (<-chan []string, error) {
	queues = slices.Clone(queues)
	return watchStored(ctx, c, "which queues are paused",
		func(payload string) bool { return slices.Contains(queues, payload) },
		func(ctx context.Context) ([]string, error) { return c.PausedQueues(ctx, queues) },
		slices.Equal[[]string]), nil
}

// watchStored follows a value stored in jobfence_queues, as WatchPaused
// describes: it reads it before it returns (within a few seconds), then
// again when a notification on pauseChannel whose payload match accepts
// arrives, when the LISTEN is back after a loss, at least every
// pauseSafetyPolls PausePollIntervals while it listens, and every
// PausePollInterval while it does not. A value is sent when it differs
// (equal) from the last one sent; what names it in the logs.
func watchStored[T any](ctx context.Context, c *Client, what string, match func(string) bool,
	read func(context.Context) (T, error), equal func(a, b T) bool) <-chan T {
	out := make(chan T, 1)
	kick := make(chan struct{}, 1)
	refresh := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	var listening atomic.Bool
	if !c.cfg.PollOnly {
		c.listen(ctx, pauseChannel, func(payload string) {
			if match(payload) {
				refresh()
			}
		}, func(up bool) {
			// Either way the value is re-read: a new LISTEN may have
			// missed notifications, and a lost one must switch the watcher
			// to polling at once, not at the end of its slow safety wait.
			listening.Store(up)
			refresh()
		})
	}
	// The LISTEN just set up precedes this read, which makes its kick
	// redundant: any change after the read is notified.
	select {
	case <-kick:
	default:
	}
	first, cancel := context.WithTimeout(ctx, 5*time.Second)
	v, err := read(first)
	cancel()
	var sent T
	if err == nil {
		out <- v
		sent = v
	}
	go watchStoredLoop(ctx, c, what, read, equal, out, kick, &listening, sent, err)
	return out
}

// watchStoredLoop re-reads the value on kick or poll and sends it when it
// changed; sent is the last value sent (the zero value if none was), and
// err the first read's failure.
func watchStoredLoop[T any](ctx context.Context, c *Client, what string, read func(context.Context) (T, error), equal func(a, b T) bool,
	out chan T, kick <-chan struct{}, listening *atomic.Bool, sent T, err error) {
	interval := c.cfg.PausePollInterval
	wait := func() time.Duration {
		if listening.Load() {
			return pauseSafetyPolls * interval
		}
		return interval
	}
	failing := false
	report := func(err error) {
		if err == nil {
			if failing {
				c.cfg.Logger.Info("jobfence: reading " + what + " again")
			}
			failing = false
			return
		}
		if !failing && ctx.Err() == nil {
			c.cfg.Logger.Warn("jobfence: cannot read "+what+"; keeping the last known until it can", "err", err)
		}
		failing = true
	}
	report(err)
	first := err != nil
	t := time.NewTimer(wait())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, max(interval, 5*time.Second))
		v, err := read(rctx)
		cancel()
		report(err)
		if err == nil && (first || !equal(v, sent)) {
			first = false
			// The only sender: replacing an unread value never blocks.
			select {
			case <-out:
			default:
			}
			out <- v
			sent = v
		}
		t.Reset(wait())
	}
}
