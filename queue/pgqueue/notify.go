package pgqueue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
)

// cancelBuffer is how many cancel notifications a Cancelled channel holds
// unread. The listener never waits for a reader (that would hold up every
// other subscription of the connection): beyond this it drops them, and
// the worker learns of those cancellations at the jobs' next heartbeat.
const cancelBuffer = 1024

// Wake implements queue.Waker with LISTEN on the client's one LISTEN
// connection, which all its subscriptions share. The channel receives a
// value whenever a job is enqueued to q, and when that connection is back
// after a loss (jobs enqueued meanwhile were not notified); while it is
// down the listener reconnects with backoff, and the worker's polling
// covers the gap. With Config.PollOnly the channel is nil: it never fires,
// and the worker polls.
func (c *Client) Wake(ctx context.Context, q string) (<-chan struct{}, error) {
	if c.cfg.PollOnly {
		return nil, nil
	}
	ch := make(chan struct{}, 1)
	wake := func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	var wasUp atomic.Bool
	c.listener.subscribe(ctx, topic{channel: insertChannel, key: q, keyed: true}, func(string) { wake() }, func(up bool) {
		if up && wasUp.Swap(true) {
			wake()
		}
	})
	return ch, nil
}

// Cancelled implements queue.Canceller: it receives the leases (ID and the
// fence of the claim then current) of jobs that Cancel cancelled, through
// the client's shared LISTEN connection. With Config.PollOnly the channel
// is nil: a worker then learns of a cancellation at its next heartbeat,
// which finds the claim gone, as it does of a cancellation sent while the
// LISTEN connection was down or while cancelBuffer notifications were
// waiting unread.
func (c *Client) Cancelled(ctx context.Context) (<-chan queue.Lease, error) {
	if c.cfg.PollOnly {
		return nil, nil
	}
	ch := make(chan queue.Lease, cancelBuffer)
	var dropped atomic.Int64
	c.listen(ctx, cancelChannel, func(payload string) {
		l, err := parseCancelPayload(payload)
		if err != nil {
			c.cfg.Logger.Warn("pgqueue: cancel notification not understood", "payload", payload, "err", err)
			return
		}
		select {
		case ch <- l:
			if n := dropped.Swap(0); n > 0 {
				c.cfg.Logger.Warn("jobfence: cancel notifications delivered again", "dropped", n)
			}
		default:
			if dropped.Add(1) == 1 {
				c.cfg.Logger.Warn("jobfence: cancel notifications are not read; dropping them, and those jobs stop at their next heartbeat",
					"unread", cancelBuffer, "job_id", l.ID)
			}
		}
	}, nil)
	return ch, nil
}

// cancelPayload is the cancel notification of lease l: "<id>:<fence>", as
// cancelSQL writes it.
func cancelPayload(l queue.Lease) string {
	return strconv.FormatInt(l.ID, 10) + ":" + strconv.FormatInt(l.Fence, 10)
}

func parseCancelPayload(s string) (queue.Lease, error) {
	id, fence, ok := strings.Cut(s, ":")
	if !ok {
		return queue.Lease{}, errors.New("want <id>:<fence>")
	}
	var l queue.Lease
	var err error
	if l.ID, err = strconv.ParseInt(id, 10, 64); err != nil {
		return queue.Lease{}, fmt.Errorf("job ID: %w", err)
	}
	if l.Fence, err = strconv.ParseInt(fence, 10, 64); err != nil {
		return queue.Lease{}, fmt.Errorf("fence: %w", err)
	}
	return l, nil
}

// listen hands every notification of channel to fn until ctx ends; see
// listener.subscribe for up. fn and up must not block.
func (c *Client) listen(ctx context.Context, channel string, fn func(string), up func(bool)) {
	c.listener.subscribe(ctx, topic{channel: channel}, fn, up)
}

// listenConn opens a connection to Config.ListenURL, or else takes one
// out of the pool for good (LISTEN state must not leak to the pool's other
// users), for the listener.
func (c *Client) listenConn(ctx context.Context) (*pgx.Conn, error) {
	if c.cfg.ListenURL != "" {
		pgc, err := pgx.Connect(ctx, c.cfg.ListenURL)
		if err != nil {
			return nil, fmt.Errorf("pgqueue: LISTEN connection to %s: %w", RedactConnString(c.cfg.ListenURL), RedactError(err, c.cfg.ListenURL))
		}
		return pgc, nil
	}
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgqueue: LISTEN connection: %w", RedactError(err, c.pool.Config().ConnString()))
	}
	return conn.Hijack(), nil
}
