package pgqueue

import (
	"context"
	"strconv"
	"time"
)

// Wake implements queue.Waker with LISTEN on a connection of its own. The
// channel receives a value whenever a job is enqueued to q; if the
// connection breaks it reconnects with backoff, and the worker's polling
// covers the gap.
func (c *Client) Wake(ctx context.Context, q string) (<-chan struct{}, error) {
	ch := make(chan struct{}, 1)
	go c.listen(ctx, insertChannel, func(payload string) {
		if payload != q {
			return
		}
		select {
		case ch <- struct{}{}:
		default:
		}
	})
	return ch, nil
}

// Cancelled implements queue.Canceller: it receives the IDs of jobs that
// Cancel cancelled while they were running.
func (c *Client) Cancelled(ctx context.Context) (<-chan int64, error) {
	ch := make(chan int64, 64)
	go c.listen(ctx, cancelChannel, func(payload string) {
		id, err := strconv.ParseInt(payload, 10, 64)
		if err != nil {
			return
		}
		select {
		case ch <- id:
		case <-ctx.Done():
		}
	})
	return ch, nil
}

// listen delivers the payloads of channel to fn until ctx ends.
func (c *Client) listen(ctx context.Context, channel string, fn func(string)) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := c.listenOnce(ctx, channel, fn)
		if ctx.Err() != nil {
			return
		}
		c.logger.Warn("jobfence: LISTEN connection lost; polling until it is back",
			"channel", channel, "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

func (c *Client) listenOnce(ctx context.Context, channel string, fn func(string)) error {
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The connection goes back to the pool never: LISTEN state must not leak
	// into other users of the pool.
	pgc := conn.Hijack()
	defer pgc.Close(context.Background())
	if _, err := pgc.Exec(ctx, "LISTEN "+channel); err != nil {
		return err
	}
	for {
		n, err := pgc.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		fn(n.Payload)
	}
}
