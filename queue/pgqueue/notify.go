package pgqueue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
)

// Wake implements queue.Waker with LISTEN on a connection of its own. The
// channel receives a value whenever a job is enqueued to q; if the
// connection breaks it reconnects with backoff, and the worker's polling
// covers the gap. With Config.PollOnly the channel is nil: it never
// fires, and the worker polls.
func (c *Client) Wake(ctx context.Context, q string) (<-chan struct{}, error) {
	if c.cfg.PollOnly {
		return nil, nil
	}
	ch := make(chan struct{}, 1)
	c.listen(ctx, insertChannel, func(payload string) {
		if payload != q {
			return
		}
		select {
		case ch <- struct{}{}:
		default:
		}
	}, nil)
	return ch, nil
}

// Cancelled implements queue.Canceller: it receives the leases (ID and the
// fence of the claim then current) of jobs that Cancel cancelled. With
// Config.PollOnly the channel is nil: a worker then learns of a
// cancellation at its next heartbeat, which finds the claim gone.
func (c *Client) Cancelled(ctx context.Context) (<-chan queue.Lease, error) {
	if c.cfg.PollOnly {
		return nil, nil
	}
	ch := make(chan queue.Lease, 64)
	c.listen(ctx, cancelChannel, func(payload string) {
		l, err := parseCancelPayload(payload)
		if err != nil {
			c.cfg.Logger.Warn("pgqueue: cancel notification not understood", "payload", payload, "err", err)
			return
		}
		select {
		case ch <- l:
		case <-ctx.Done():
		}
	}, nil)
	return ch, nil
}

// cancelPayload is the cancel notification of lease l: "<id>:<fence>".
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

// listen delivers the payloads of channel to fn until ctx ends. The first
// LISTEN is in place when listen returns (unless the database is down), so
// no notification sent afterwards is missed; the rest runs in a goroutine.
// up, when not nil, is told each time a LISTEN is in place (true) and each
// time its connection is lost (false): notifications sent in between are
// lost, and a caller that keeps state from them re-reads it on true.
func (c *Client) listen(ctx context.Context, channel string, fn func(string), up func(bool)) {
	if up == nil {
		up = func(bool) {}
	}
	// Bounded: a database that accepts connections but does not answer must
	// not hold up the caller (a worker's Start); the goroutine keeps trying.
	first, cancel := context.WithTimeout(ctx, 5*time.Second)
	pgc, err := c.listenConn(first, channel)
	cancel()
	if err == nil {
		up(true)
	}
	go func() {
		if err == nil {
			err = c.receive(ctx, pgc, fn)
			up(false)
		}
		c.relisten(ctx, channel, fn, up, err)
	}()
}

// relisten reconnects with backoff after the LISTEN connection failed.
func (c *Client) relisten(ctx context.Context, channel string, fn func(string), up func(bool), err error) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		if err == nil {
			var pgc *pgx.Conn
			pgc, err = c.listenConn(ctx, channel)
			if err == nil {
				backoff = 100 * time.Millisecond
				up(true)
				err = c.receive(ctx, pgc, fn)
				up(false)
			}
		}
		if ctx.Err() != nil {
			return
		}
		c.cfg.Logger.Warn("jobfence: LISTEN connection lost; polling until it is back",
			"channel", channel, "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
		err = nil
	}
}

// listenConn opens a connection to Config.ListenURL, or else takes one
// out of the pool for good (LISTEN state must not leak to the pool's other
// users), and listens on channel.
func (c *Client) listenConn(ctx context.Context, channel string) (*pgx.Conn, error) {
	var pgc *pgx.Conn
	if c.cfg.ListenURL != "" {
		var err error
		if pgc, err = pgx.Connect(ctx, c.cfg.ListenURL); err != nil {
			return nil, fmt.Errorf("pgqueue: LISTEN connection to %s: %w", RedactConnString(c.cfg.ListenURL), RedactError(err, c.cfg.ListenURL))
		}
	} else {
		conn, err := c.pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		pgc = conn.Hijack()
	}
	if _, err := pgc.Exec(ctx, "LISTEN "+channel); err != nil {
		pgc.Close(context.Background())
		return nil, err
	}
	return pgc, nil
}

// receive hands notifications to fn until the connection fails or ctx ends.
func (c *Client) receive(ctx context.Context, pgc *pgx.Conn, fn func(string)) error {
	defer pgc.Close(context.Background())
	for {
		n, err := pgc.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		fn(n.Payload)
	}
}
