package pgqueue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/jobfence/jobfence/internal/txbound"
	"github.com/jobfence/jobfence/queue"
)

// insertSQL inserts one job in one statement (outside a transaction, one
// round trip and one commit: most of what an enqueue costs) and says
// whether it is ready now. With a channel in $9 it also wakes the queue's
// workers, when the statement's transaction commits (EnqueueTx: the
// caller's); CASE evaluates the notify only for a ready job. No row comes
// back when the unique key is taken. $11 is the job's idempotency key
// (see newJobKey), $12 its deadline and $13 its timeout (NULL for none).
const insertSQL = `
WITH ins AS (
    INSERT INTO jobfence_jobs (queue, kind, args, state, priority, scheduled_at, max_attempts, unique_key, metadata, trace_context,
                               idempotency_key, deadline, timeout_us)
    VALUES ($1, $2, $3, CASE WHEN $4::timestamptz > now() THEN 'scheduled' ELSE 'available' END,
            $5, COALESCE($4::timestamptz, now()), $6, NULLIF($7, ''), $8, $10, $11, $12, $13)
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL DO NOTHING
    RETURNING id, queue, state = 'available' AS ready
)
SELECT id, ready, CASE WHEN ready AND $9 <> '' THEN pg_notify($9, queue)::text END FROM ins`

const existingSQL = `SELECT id FROM jobfence_jobs WHERE unique_key = $1`

const notifySQL = `SELECT pg_notify($1, q) FROM unnest($2::text[]) AS q`

// Enqueue inserts one job and wakes idle workers of its queue: one
// statement (one round trip, one commit) for the insert, then the
// wake-up (see wakeAfterCommit). With a UniqueKey that a stored job
// already holds, nothing is inserted and the result names the existing
// job with Inserted false.
func (c *Client) Enqueue(ctx context.Context, p queue.EnqueueParams) (queue.EnqueueResult, error) {
	var res queue.EnqueueResult
	_, err := queue.Observe(ctx, c.cfg.InsertHook, []queue.EnqueueParams{p}, func(ctx context.Context, meta map[string]string) (int64, error) {
		var ready bool
		var err error
		if res, ready, err = enqueue(ctx, c.pool, p, meta, ""); err != nil {
			return 0, err
		}
		if ready {
			c.wakeAfterCommit(ctx, []string{p.WithDefaults().Queue})
		}
		return inserted(res), nil
	})
	return res, err
}

// wakeAfterCommit wakes the workers of queues whose jobs have committed,
// in a transaction of its own. PostgreSQL makes the commits of
// transactions that NOTIFY take turns (a lock held until each has flushed
// its commit to disk, to keep notifications in commit order): a NOTIFY in
// the insert's own transaction caps a durable server at about one insert
// per disk flush, and queues every insert behind the others' flushes. A
// transaction that only notifies writes nothing and flushes nothing, so
// its turn is short. A wake-up is a hint: if it fails, the job is
// committed all the same and the workers' polls find it, so the failure
// is logged, not returned (the caller would enqueue the job again).
func (c *Client) wakeAfterCommit(ctx context.Context, queues []string) {
	if _, err := c.pool.Exec(ctx, notifySQL, insertChannel, queues); err != nil {
		c.cfg.Logger.Warn("pgqueue: jobs enqueued, but waking their workers failed; they find the jobs at their next poll",
			"queues", queues, "err", err)
	}
}

// EnqueueTx inserts one job inside the caller's transaction: the job exists,
// and workers are woken, only if tx commits. The wake-up's NOTIFY is part
// of tx, so tx's commit takes its turn with other notifying commits (see
// wakeAfterCommit): at thousands of such commits a second on a durable
// server, prefer Enqueue, or EnqueueManyTx for many jobs at once.
func (c *Client) EnqueueTx(ctx context.Context, tx pgx.Tx, p queue.EnqueueParams) (queue.EnqueueResult, error) {
	var res queue.EnqueueResult
	_, err := queue.Observe(ctx, c.cfg.InsertHook, []queue.EnqueueParams{p}, func(ctx context.Context, meta map[string]string) (int64, error) {
		var err error
		res, _, err = enqueue(ctx, tx, p, meta, insertChannel)
		return inserted(res), err
	})
	return res, err
}

// inserted counts res for an InsertHook.
func inserted(res queue.EnqueueResult) int64 {
	if res.Inserted {
		return 1
	}
	return 0
}

// Insert encodes args and enqueues a job of kind args.Kind() with opts
// (which may be nil).
func (c *Client) Insert(ctx context.Context, args queue.Args, opts *queue.InsertOpts) (queue.EnqueueResult, error) {
	p, err := queue.Params(args, opts)
	if err != nil {
		return queue.EnqueueResult{}, err
	}
	return c.Enqueue(ctx, p)
}

// InsertTx is Insert inside the caller's transaction.
func (c *Client) InsertTx(ctx context.Context, tx pgx.Tx, args queue.Args, opts *queue.InsertOpts) (queue.EnqueueResult, error) {
	p, err := queue.Params(args, opts)
	if err != nil {
		return queue.EnqueueResult{}, err
	}
	return c.EnqueueTx(ctx, tx, p)
}

// enqueue inserts p through db and reports whether the job is ready now.
// With a channel, the insert notifies it (when db's transaction commits).
func enqueue(ctx context.Context, db DB, p queue.EnqueueParams, meta map[string]string, channel string) (queue.EnqueueResult, bool, error) {
	p = p.WithDefaults()
	if err := p.Validate(); err != nil {
		return queue.EnqueueResult{}, false, err
	}
	md, tc, err := encodeMetadata(p.Metadata, meta)
	if err != nil {
		return queue.EnqueueResult{}, false, fmt.Errorf("pgqueue: enqueue %s: %w", p.Kind, err)
	}
	var at *time.Time
	if !p.ScheduledAt.IsZero() {
		at = &p.ScheduledAt
	}
	// The conflicting job can be pruned between the insert and the look-up;
	// then the next insert succeeds.
	for range 3 {
		var id int64
		var ready bool
		err := db.QueryRow(ctx, insertSQL, p.Queue, p.Kind, p.Args, at, p.Priority, p.MaxAttempts, p.UniqueKey, md, channel, tc,
			newJobKey(), deadlineParam(p.Deadline), timeoutParam(p.Timeout)).Scan(&id, &ready, nil)
		if err == nil {
			return queue.EnqueueResult{ID: id, Inserted: true}, ready, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return queue.EnqueueResult{}, false, fmt.Errorf("pgqueue: enqueue %s: %w", p.Kind, err)
		}
		err = db.QueryRow(ctx, existingSQL, p.UniqueKey).Scan(&id)
		if err == nil {
			return queue.EnqueueResult{ID: id, Inserted: false}, false, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return queue.EnqueueResult{}, false, fmt.Errorf("pgqueue: enqueue %s: look up unique key: %w", p.Kind, err)
		}
	}
	return queue.EnqueueResult{}, false, fmt.Errorf("pgqueue: enqueue %s: unique key %q kept changing hands", p.Kind, p.UniqueKey)
}

// copyColumns are the columns EnqueueMany writes through COPY. The state
// and scheduled_at take their defaults ('available', the database's now()):
// a host clock that runs ahead must not delay the jobs.
var copyColumns = []string{"queue", "kind", "args", "priority", "max_attempts", "metadata", "trace_context",
	"idempotency_key", "deadline", "timeout_us"}

const insertManySQL = `
INSERT INTO jobfence_jobs (queue, kind, args, state, priority, scheduled_at, max_attempts, unique_key, metadata, trace_context,
                           idempotency_key, deadline, timeout_us)
SELECT q, k, a, CASE WHEN s > now() THEN 'scheduled' ELSE 'available' END, p, COALESCE(s, now()), m, NULLIF(u, ''), md, tc, ik, dl, tm
FROM unnest($1::text[], $2::text[], $3::jsonb[], $4::smallint[], $5::timestamptz[], $6::int[], $7::text[], $8::jsonb[], $9::bytea[],
            $10::uuid[], $11::timestamptz[], $12::bigint[])
     AS t(q, k, a, p, s, m, u, md, tc, ik, dl, tm)
ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL DO NOTHING`

// boundedBegin begins a transaction of statements that jobfence sends back
// to back, such as EnqueueMany's COPY and insert of the jobs with unique
// keys, which cannot be one statement, or ExplainClaim's claim and
// rollback. Bounded, it holds what it inserted and locked (unique keys
// that others wait for, claimed jobs) txbound.Idle past a client that
// froze between its statements, not for as long as it stays frozen.
var boundedBegin = txbound.Begin(txbound.Idle, txbound.LockWait)

// EnqueueMany inserts many jobs in one round trip and returns how many were
// inserted. Jobs to run now without unique keys go through COPY, the
// fastest path; jobs with unique keys or a ScheduledAt are inserted with
// ON CONFLICT DO NOTHING and are not counted when their key was taken.
func (c *Client) EnqueueMany(ctx context.Context, ps []queue.EnqueueParams) (int64, error) {
	return queue.Observe(ctx, c.cfg.InsertHook, ps, func(ctx context.Context, meta map[string]string) (int64, error) {
		tx, err := c.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: boundedBegin})
		if err != nil {
			return 0, fmt.Errorf("pgqueue: enqueue many: %w", err)
		}
		defer tx.Rollback(ctx)
		n, queues, err := enqueueMany(ctx, tx, ps, meta, false)
		if err != nil {
			return 0, err
		}
		if err := tx.Commit(ctx); err != nil {
			return 0, fmt.Errorf("pgqueue: enqueue many: commit: %w", err)
		}
		if len(queues) > 0 {
			c.wakeAfterCommit(ctx, queues)
		}
		return n, nil
	})
}

// EnqueueManyTx is EnqueueMany inside the caller's transaction.
func (c *Client) EnqueueManyTx(ctx context.Context, tx pgx.Tx, ps []queue.EnqueueParams) (int64, error) {
	return queue.Observe(ctx, c.cfg.InsertHook, ps, func(ctx context.Context, meta map[string]string) (int64, error) {
		n, _, err := enqueueMany(ctx, tx, ps, meta, true)
		return n, err
	})
}

// enqueueMany inserts ps in tx and returns how many it inserted and the
// queues that got jobs ready now, which it notifies in tx when notify is
// set.
func enqueueMany(ctx context.Context, tx pgx.Tx, ps []queue.EnqueueParams, meta map[string]string, notify bool) (int64, []string, error) {
	// Jobs without metadata of their own share the hook's, encoded once.
	shared, sharedTC, err := encodeMetadata(nil, meta)
	if err != nil {
		return 0, nil, fmt.Errorf("pgqueue: enqueue many: %w", err)
	}
	now := time.Now()
	var plain [][]any
	var uq struct {
		q, k, u []string
		a       [][]byte
		p       []int16
		s       []*time.Time
		m       []int32
		md, tc  [][]byte
		ik      []pgtype.UUID
		dl      []*time.Time
		tm      []*int64
	}
	queues := map[string]bool{}
	keys := newJobKeys(len(ps))
	for i, p := range ps {
		p = p.WithDefaults()
		if err := p.Validate(); err != nil {
			return 0, nil, fmt.Errorf("pgqueue: enqueue many: job %d: %w", i, err)
		}
		md, tc := shared, sharedTC
		if len(p.Metadata) > 0 {
			if md, tc, err = encodeMetadata(p.Metadata, meta); err != nil {
				return 0, nil, fmt.Errorf("pgqueue: enqueue many: job %d: %w", i, err)
			}
		}
		// A wake-up is only a hint (workers poll too), so the host's clock
		// may decide it; the job's own times come from the database's.
		if !p.ScheduledAt.After(now) {
			queues[p.Queue] = true
		}
		if p.UniqueKey == "" && p.ScheduledAt.IsZero() {
			plain = append(plain, []any{p.Queue, p.Kind, p.Args, int16(p.Priority), int32(p.MaxAttempts), md, tc,
				keys[i], deadlineParam(p.Deadline), timeoutParam(p.Timeout)})
			continue
		}
		uq.q = append(uq.q, p.Queue)
		uq.k = append(uq.k, p.Kind)
		uq.a = append(uq.a, p.Args)
		uq.p = append(uq.p, int16(p.Priority))
		if p.ScheduledAt.IsZero() {
			uq.s = append(uq.s, nil) // the database's now(), as for single inserts
		} else {
			at := p.ScheduledAt
			uq.s = append(uq.s, &at)
		}
		uq.m = append(uq.m, int32(p.MaxAttempts))
		uq.u = append(uq.u, p.UniqueKey)
		uq.md = append(uq.md, md)
		uq.tc = append(uq.tc, tc)
		uq.ik = append(uq.ik, keys[i])
		uq.dl = append(uq.dl, deadlineParam(p.Deadline))
		uq.tm = append(uq.tm, timeoutParam(p.Timeout))
	}
	var n int64
	if len(plain) > 0 {
		copied, err := tx.CopyFrom(ctx, pgx.Identifier{"jobfence_jobs"}, copyColumns, pgx.CopyFromRows(plain))
		if err != nil {
			return 0, nil, fmt.Errorf("pgqueue: enqueue many: copy: %w", err)
		}
		n += copied
	}
	if len(uq.q) > 0 {
		tag, err := tx.Exec(ctx, insertManySQL, uq.q, uq.k, uq.a, uq.p, uq.s, uq.m, uq.u, uq.md, uq.tc, uq.ik, uq.dl, uq.tm)
		if err != nil {
			return 0, nil, fmt.Errorf("pgqueue: enqueue many: insert: %w", err)
		}
		n += tag.RowsAffected()
	}
	names := make([]string, 0, len(queues))
	for q := range queues {
		names = append(names, q)
	}
	if notify && len(names) > 0 {
		if _, err := tx.Exec(ctx, notifySQL, insertChannel, names); err != nil {
			return 0, nil, fmt.Errorf("pgqueue: enqueue many: notify: %w", err)
		}
	}
	return n, names, nil
}
