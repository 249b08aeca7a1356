package pgqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
)

// wakeQueueSQL wakes the workers of queue $2 as wakeSQL does, unless a
// limit may govern its jobs of kind $3 (limitOfSQL's probe): such a job
// is inserted limited, not ready, and the grant that gives it a slot
// wakes the workers. enqueueAndWake sends the wake-up before the insert's
// reply says whether the job is ready, so the wake-up asks the limits
// itself; a limit made or dropped between the two only costs a wake-up
// (a poll finds the job) or an empty claim.
const wakeQueueSQL = `SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, $2)
WHERE NOT EXISTS (SELECT FROM jobfence_limits m WHERE m.queue = $2 AND m.kind IN ($3, ''))`

// oneRoundTrip says whether Enqueue sends p's insert and its
// wake-up in one round trip (enqueueAndWake): a job without a unique key
// (whose insert always inserts) and without a time of its own (ready
// unless a limit governs it). The others insert, then wake in a second
// round trip if the insert says the job is ready.
func oneRoundTrip(p queue.EnqueueParams) bool {
	return p.UniqueKey == "" && p.Unique == nil && p.ScheduledAt.IsZero()
}

// enqueueAndWake inserts p (see oneRoundTrip) and wakes its queue's
// workers in one round trip: one batch of two transactions, the
// insert's (an explicit BEGIN ... COMMIT, a durable commit) and then the
// wake-up's (the implicit one the batch's end commits). The server
// commits the insert before it runs the wake-up, so the NOTIFY stays out
// of the insert's transaction (see wakeAfterCommit), and the workers hear
// of the job without waiting for this client to read the insert's reply
// and send a second statement. A batch ends with one Sync, so PgBouncer
// in transaction mode keeps it on one server connection.
//
// The server runs the batch to its end without waiting for this client.
// A client frozen or cut off while the batch was only partly sent leaves
// its transaction open, holding what it read (the limits' table, which a
// migration may wait to lock) and wrote, with no idle bound of the
// server's to end it (see batchBoundsSQL): a worker's maintenance ends
// such a session (EndStalledSessions). A failed insert skips the wake-up (the server skips the rest of
// a batch after an error). A wake-up that fails is logged, as
// wakeAfterCommit's is: the job is committed.
//
// The wake-up rides in the batch only when no other wake-up of the queue
// is in flight from this client (see wakes). Otherwise the job rides on
// the next wake-up, and its insert is one statement that commits itself
// (as Enqueue's first round trip of two is): the batch's BEGIN, bound and
// COMMIT are there only to keep the insert's transaction apart from the
// wake-up's.
func (c *Client) enqueueAndWake(ctx context.Context, p queue.EnqueueParams, meta map[string]string) (queue.EnqueueResult, *partition, error) {
	p = p.WithDefaults()
	if err := p.Validate(); err != nil {
		return queue.EnqueueResult{}, nil, err
	}
	turn := c.wakes.take(p.Queue)
	if turn == wakeRide {
		res, ready, lim, err := enqueue(ctx, c.pool, p, meta, "", c.cfg.Encryption)
		// An insert whose reply did not come (ctx ended, the connection
		// broke) may have committed all the same, as a batch's insert and
		// wake-up would have: it costs a wake-up at most.
		if ready || err != nil {
			c.wakes.committed(ctx, p.Queue)
		}
		return res, lim, err
	}
	if turn == wakeSend {
		// Once the wake-up's reply is in, or the batch failed (deferred
		// before the batch's Close, so it runs after it).
		defer c.wakeDone(ctx, p.Queue)
	}
	fail := func(err error) (queue.EnqueueResult, *partition, error) {
		return queue.EnqueueResult{}, nil, fmt.Errorf("pgqueue: enqueue %s: %w", p.Kind, err)
	}
	md, tc, err := encodeMetadata(p.Metadata, meta)
	if err != nil {
		return fail(err)
	}
	u, p, err := sealed(p, c.cfg.Encryption, time.Now())
	if err != nil {
		return fail(err)
	}
	var b pgx.Batch
	b.Queue("BEGIN")
	b.Queue(batchBoundsSQL)
	b.Queue(u.insert, insertArgs(p, nil, md, tc, "", u)...)
	b.Queue("COMMIT")
	b.Queue(wakeQueueSQL, insertChannel, p.Queue, p.Kind)
	br := c.pool.SendBatch(ctx, &b)
	defer br.Close()
	var id int64
	var state queue.State
	var ins bool
	var limName, limPart *string
	_, err = br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		err = br.QueryRow().Scan(&id, nil, &state, &ins, nil, &limName, &limPart)
	}
	if err == nil {
		// The job exists once the COMMIT's reply is in.
		_, err = br.Exec()
	}
	if err != nil {
		return fail(err)
	}
	if _, err := br.Exec(); err != nil {
		c.cfg.Logger.Warn("pgqueue: job enqueued, but waking its workers failed; they find it at their next poll",
			"queue", p.Queue, "err", err)
	}
	res, lim := inserted1(id, state, ins, limName, limPart)
	return res, lim, nil
}
