package pgqueue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
)

// insertSQL inserts one job in one statement (outside a transaction, one
// round trip and one commit: most of what an enqueue costs) and says
// whether it is ready now. With a channel in $9 it also wakes the queue's
// workers, when the statement's transaction commits (EnqueueTx: the
// caller's); CASE evaluates the notify only for a ready job. No row comes
// back when the unique key is taken. $11 is the job's idempotency key
// (see newJobKey), $12 its deadline, $13 its timeout (NULL for none), $14
// and $15 its computed unique hash and states (NULL for none). The
// conflict clause (%[3]s) names the unique index that decides, or is empty
// for a job without a key; see insertStatements. inserted tells
// a new job from an existing one that a debounce moved: only the new row
// has the idempotency key drawn for this insert.
//
// A job that a limit governs (limitOfSQL, $16 its limit key) is inserted
// limited, to wait for a slot, unless it waits for a time of its own
// first; the statement returns its limit's name and partition. $17 is
// its DeleteOnComplete, stored as NULL when false (see migration 00017).
// A job with tags is inserted by the tagged statements (%[1]s and %[2]s
// name the column and $18); one without them by statements that do not
// name the column, so that its insert sends and checks nothing more than
// before tags were (see insertStatements).
//
// transition: insert
const insertSQL = `
WITH ` + limitOfSQL + `, ins AS (
    INSERT INTO jobfence_jobs (queue, kind, args, state, priority, scheduled_at, max_attempts, unique_key, metadata, trace_context,
                               idempotency_key, deadline, timeout_us, unique_hash, unique_states, limit_name, limit_part, limit_fair, delete_on_complete%[1]s)
    VALUES ($1, $2, $3, CASE WHEN $4::timestamptz > now() THEN 'scheduled' WHEN EXISTS (SELECT FROM lim) THEN 'limited' ELSE 'available' END,
            $5, COALESCE($4::timestamptz, now()), $6, NULLIF($7, ''), $8, $10, $11, $12, $13, $14, $15,
            (SELECT name FROM lim), (SELECT part FROM lim), (SELECT fair FROM lim), NULLIF($17::boolean, false)%[2]s)
    %[3]s
    RETURNING id, queue, state, state = 'available' AS ready, idempotency_key = $11 AS inserted, limit_name, limit_part
)
SELECT id, ready, state, inserted, CASE WHEN ready AND $9 <> '' THEN pg_notify($9, queue)::text END, limit_name, limit_part FROM ins`

// limitOfSQL finds the limit (lim: its name, the job's partition part and
// its fair key fair, jobFairSQL)
// that governs a job of queue $1 and kind $2 with args $3 and limit key
// $16: its kind's, else its queue's. The partition is the limit key, or
// the JSON array of the args' PartitionBy fields, or empty (one
// partition).
// A probe of the limits' (queue, kind) index: an insert of a queue with no
// limit pays that alone.
const limitOfSQL = `lim AS (
    SELECT m.name, CASE WHEN $16::text <> '' THEN $16::text ELSE ` + jobPartSQL + ` END AS part, ` + jobFairSQL + ` AS fair
    FROM jobfence_limits m, (SELECT $3::jsonb AS args) j
    WHERE m.queue = $1 AND m.kind IN ($2, '')
    ORDER BY m.kind DESC
    LIMIT 1
)`

// uniqueHashArbiter is the predicate of jobfence_jobs_unique_hash
// (migration 00012): naming it in ON CONFLICT is how PostgreSQL picks
// that index, and a look-up that repeats it reads that index.
const uniqueHashArbiter = `(unique_hash) WHERE unique_hash IS NOT NULL AND jobfence_state_in_bitmask(unique_states, state)`

// insertStatements are the four statements of insertSQL, by how the job
// is made unique, for jobs with or without tags.
type insertStatements struct {
	// plain inserts a job without a key: nothing can refuse it, and an
	// insert without ON CONFLICT skips the speculative insertion (a look
	// in the arbiter index first, and a WAL record more to confirm the
	// row).
	plain string
	// keyed inserts a job with a UniqueKey, which refuses duplicates in
	// every state.
	keyed string
	// hashed inserts a job with UniqueOpts.
	hashed string
	// debounced inserts a job with UniqueOpts.Debounce (debounceSQL).
	debounced string
}

// newInsertStatements returns insertSQL's statements, with the tags
// column ($18) when tagged.
func newInsertStatements(tagged bool) insertStatements {
	col, val := "", ""
	if tagged {
		col, val = ", tags", ", $18::text[]"
	}
	stmt := func(conflict string) string { return fmt.Sprintf(insertSQL, col, val, conflict) }
	return insertStatements{
		plain:     stmt(``),
		keyed:     stmt(`ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL DO NOTHING`),
		hashed:    stmt(`ON CONFLICT ` + uniqueHashArbiter + ` DO NOTHING`),
		debounced: stmt(debounceSQL),
	}
}

// debounceSQL is the conflict clause of an insert with
// UniqueOpts.Debounce: a duplicate that has not started (available,
// scheduled, or limited: waiting for a limit's slot) takes the new job's
// scheduled time and the state that goes with it (each in every unique
// job's states, so the row stays in the index); one that has started is
// left alone and no row comes back. Put off to a later time, it is
// scheduled and names the slot it had, which it keeps while scheduled
// where its limit holds slots through retries (holdingSQL: a sequence's
// turn is not passed to a later job), and frees elsewhere; moved to now,
// an available job stays available (with its slot), and one that a limit
// governs waits for a slot (debouncedState).
//
// transition: debounce
const debounceSQL = `ON CONFLICT ` + uniqueHashArbiter + `
    DO UPDATE SET scheduled_at = EXCLUDED.scheduled_at, state = ` + debouncedState + `,
        limit_name = CASE WHEN ` + debouncedState + ` = 'available' THEN jobfence_jobs.limit_name
            ELSE coalesce(jobfence_jobs.limit_name, EXCLUDED.limit_name) END,
        limit_part = CASE WHEN ` + debouncedState + ` = 'available' THEN jobfence_jobs.limit_part
            ELSE coalesce(jobfence_jobs.limit_part, EXCLUDED.limit_part) END,
        limit_fair = CASE WHEN ` + debouncedState + ` = 'available' OR jobfence_jobs.limit_name IS NOT NULL THEN jobfence_jobs.limit_fair
            ELSE EXCLUDED.limit_fair END,
        limit_slot = CASE WHEN ` + debouncedState + ` IN ('available', 'scheduled') THEN jobfence_jobs.limit_slot END
    WHERE jobfence_jobs.state IN ('available', 'scheduled', 'limited')`

// untaggedInserts and taggedInserts insert jobs without and with tags.
var (
	untaggedInserts = newInsertStatements(false)
	taggedInserts   = newInsertStatements(true)
)

// debouncedState is the state a debounced duplicate takes: scheduled for
// a later time; else available if it was (it may hold a limit's slot);
// else limited if a limit governs it (its own, or the insert's: one set
// since it was inserted); else available.
const debouncedState = `(CASE WHEN EXCLUDED.state = 'scheduled' THEN 'scheduled'
        WHEN jobfence_jobs.state = 'available' THEN 'available'
        WHEN coalesce(jobfence_jobs.limit_name, EXCLUDED.limit_name) IS NOT NULL THEN 'limited'
        ELSE 'available' END)`

// existingKeySQL and existingHashSQL find the job that refused an insert.
const (
	existingKeySQL  = `SELECT id, state FROM jobfence_jobs WHERE unique_key = $1`
	existingHashSQL = `SELECT id, state FROM jobfence_jobs WHERE unique_hash = $1 AND jobfence_state_in_bitmask(unique_states, state)`
)

// notifySQL wakes the workers of queues $2 inside the caller's
// transaction. wakeSQL does it in a statement that is its own transaction
// and commits without waiting for its commit record to reach the disk
// (set_config's true makes the setting this transaction's only).
const (
	notifySQL = `SELECT pg_notify($1, q) FROM unnest($2::text[]) AS q`
	wakeSQL   = `SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, q) FROM unnest($2::text[]) AS q`
)

// Enqueue inserts one job and wakes idle workers of its queue: one
// statement (one commit) for the insert, then the wake-up in a
// transaction of its own (see wakeAfterCommit), both in one round trip
// for a job to run now without a unique key (see enqueueAndWake), else
// in two. While another wake-up of the queue is in flight from this
// client, the job rides on the next one instead (see wakes). With a
// UniqueKey that a stored job already holds, nothing is inserted and the
// result names the existing job with Inserted false.
func (c *Client) Enqueue(ctx context.Context, p queue.EnqueueParams) (queue.EnqueueResult, error) {
	return c.enqueueOne(ctx, p, oneRoundTrip(p))
}

// enqueueOne is Enqueue, sending p's insert and its wake-up in one round
// trip (enqueueAndWake) when oneTrip is set, which oneRoundTrip(p) must
// allow, else in two (the insert, then the wake-up if the job is ready).
// Enqueue sets it wherever p allows; BenchmarkEnqueue also enqueues with
// it unset, to measure what the one round trip saves.
func (c *Client) enqueueOne(ctx context.Context, p queue.EnqueueParams, oneTrip bool) (queue.EnqueueResult, error) {
	var res queue.EnqueueResult
	_, err := c.observe(ctx, []queue.EnqueueParams{p}, func(ctx context.Context, meta map[string]string) (int64, error) {
		var ready bool
		var err error
		var lim *partition
		if oneTrip {
			res, lim, err = c.enqueueAndWake(ctx, p, meta)
		} else {
			res, ready, lim, err = enqueue(ctx, c.pool, p, meta, "", c.cfg.Encryption)
		}
		if err != nil {
			return 0, err
		}
		if ready {
			c.wakeCommitted(ctx, p.WithDefaults().Queue)
		}
		if lim != nil {
			// Committed (one statement): a free slot is the job's now.
			c.grantAfter(ctx, []partition{*lim})
		}
		return inserted(res), nil
	})
	return res, err
}

// wakeAfterCommit wakes the workers of queues whose jobs have committed,
// in a transaction of its own. PostgreSQL makes the commits of
// transactions that NOTIFY take turns (a lock held until each commit is
// done, to keep notifications in commit order): a NOTIFY in the insert's
// own transaction caps a durable server at about one insert per disk
// flush, and queues every insert behind the others' flushes. A
// notify-only transaction is not free either: NOTIFY gives it a
// transaction ID, so it writes a commit record and, with
// synchronous_commit on, holds its turn until that record is flushed.
// wakeSQL commits it asynchronously: nothing is lost if the server
// crashes before the flush, since a wake-up is not durable anyway and the
// job's own insert committed (and flushed) before it. A wake-up is a
// hint: if it fails, the job is committed all the same and the workers'
// polls find it, so the failure is logged, not returned (the caller would
// enqueue the job again).
func (c *Client) wakeAfterCommit(ctx context.Context, queues []string) {
	if _, err := c.pool.Exec(ctx, wakeSQL, insertChannel, queues); err != nil {
		c.cfg.Logger.Warn("pgqueue: jobs enqueued, but waking their workers failed; they find the jobs at their next poll",
			"queues", queues, "err", err)
	}
}

// wakeCommitted wakes the workers of queue q for a job committed and
// ready: at once if no other wake-up of q is in flight from this client,
// else with the next one (see wakes).
func (c *Client) wakeCommitted(ctx context.Context, q string) {
	switch c.wakes.take(q) {
	case wakeRide:
		c.wakes.committed(ctx, q)
	case wakeSend:
		c.wakeAfterCommit(ctx, []string{q})
		c.wakeDone(ctx, q)
	case wakeOwn:
		c.wakeAfterCommit(ctx, []string{q})
	}
}

// wakeDone ends q's wake-up that the caller sent (wakeSend), and sends
// the next one if the jobs that rode on it need it sent here (see
// wakes.done).
func (c *Client) wakeDone(ctx context.Context, q string) {
	if c.wakes.done(q) {
		c.wakeAfterCommit(ctx, []string{q})
	}
}

// EnqueueTx inserts one job inside the caller's transaction: the job exists,
// and workers are woken, only if tx commits. The wake-up's NOTIFY is part
// of tx, so tx's commit takes its turn with other notifying commits (see
// wakeAfterCommit): at thousands of such commits a second on a durable
// server, prefer Enqueue, or EnqueueManyTx for many jobs at once.
func (c *Client) EnqueueTx(ctx context.Context, tx pgx.Tx, p queue.EnqueueParams) (queue.EnqueueResult, error) {
	var res queue.EnqueueResult
	_, err := c.observe(ctx, []queue.EnqueueParams{p}, func(ctx context.Context, meta map[string]string) (int64, error) {
		var err error
		// A limited job waits for the workers' next grant pass: a grant
		// here would hold its slots' rows for as long as tx stays open.
		res, _, _, err = enqueue(ctx, tx, p, meta, insertChannel, c.cfg.Encryption)
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

// enqueue inserts p through db and reports whether the job is ready now,
// and its limit's partition when it waits for a slot. With a channel, the
// insert notifies it (when db's transaction commits). ring (which may be
// nil) seals p's args when it encrypts p (see sealed).
func enqueue(ctx context.Context, db DB, p queue.EnqueueParams, meta map[string]string, channel string, ring *queue.KeyRing) (queue.EnqueueResult, bool, *partition, error) {
	p = p.WithDefaults()
	if err := p.Validate(); err != nil {
		return queue.EnqueueResult{}, false, nil, err
	}
	md, tc, err := encodeMetadata(p.Metadata, meta)
	if err != nil {
		return queue.EnqueueResult{}, false, nil, fmt.Errorf("pgqueue: enqueue %s: %w", p.Kind, err)
	}
	var at *time.Time
	if !p.ScheduledAt.IsZero() {
		at = &p.ScheduledAt
	}
	u, p, err := sealed(p, ring, time.Now())
	if err != nil {
		return queue.EnqueueResult{}, false, nil, fmt.Errorf("pgqueue: enqueue %s: %w", p.Kind, err)
	}
	// The conflicting job can be pruned, or leave the states in which it
	// refuses duplicates, between the insert and the look-up; then the
	// next insert succeeds.
	for range 3 {
		var id int64
		var ready, ins bool
		var state queue.State
		var limName, limPart *string
		err := db.QueryRow(ctx, u.insert, insertArgs(p, at, md, tc, channel, u)...).Scan(&id, &ready, &state, &ins, nil, &limName, &limPart)
		if err == nil {
			res, lim := inserted1(id, state, ins, limName, limPart)
			return res, ready, lim, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) || u.existing == "" {
			return queue.EnqueueResult{}, false, nil, fmt.Errorf("pgqueue: enqueue %s: %w", p.Kind, err)
		}
		err = db.QueryRow(ctx, u.existing, u.key).Scan(&id, &state)
		if err == nil {
			return queue.EnqueueResult{ID: id, Inserted: false, State: state}, false, nil, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return queue.EnqueueResult{}, false, nil, fmt.Errorf("pgqueue: enqueue %s: look up unique key: %w", p.Kind, err)
		}
	}
	return queue.EnqueueResult{}, false, nil, fmt.Errorf("pgqueue: enqueue %s: unique key %s kept changing hands", p.Kind, u)
}

// insertArgs are insertSQL's arguments for p (with its defaults), its
// time at (nil for now), its encoded metadata md and trace context tc,
// the channel it notifies in its transaction ("" for none) and its
// uniqueness u. Each call draws a new idempotency key.
func insertArgs(p queue.EnqueueParams, at *time.Time, md, tc []byte, channel string, u uniqueness) []any {
	args := []any{p.Queue, p.Kind, p.Args, at, p.Priority, p.MaxAttempts, p.UniqueKey, md, channel, tc,
		newJobKey(), deadlineParam(p.Deadline), timeoutParam(p.Timeout), u.hash, u.states, p.LimitKey, p.DeleteOnComplete}
	if len(p.Tags) > 0 {
		args = append(args, queue.MergeTags(p.Tags, nil))
	}
	return args
}

// inserted1 is the result of insertSQL's row, and the limit partition
// whose slots the insert may have changed: a new limited job's, or a
// debounced job's (a debounce that put a job off may have freed its
// slot).
func inserted1(id int64, state queue.State, ins bool, limName, limPart *string) (queue.EnqueueResult, *partition) {
	var lim *partition
	if (state == queue.StateLimited || !ins) && limName != nil && limPart != nil {
		lim = &partition{*limName, *limPart}
	}
	return queue.EnqueueResult{ID: id, Inserted: ins, State: state, Debounced: !ins}, lim
}

// uniqueness is how one insert is made unique: the statement that
// inserts it, its computed hash and states (nil for none), and the
// look-up of the job that refused it with its argument ("" for a job
// without a key, which nothing refuses).
type uniqueness struct {
	insert, existing string
	hash             []byte
	states           *int16
	key              any
}

// String names the key in an error.
func (u uniqueness) String() string {
	if u.hash != nil {
		return fmt.Sprintf("%x", u.hash)
	}
	return fmt.Sprintf("%q", u.key)
}

// sealed returns p's uniqueness (its hash keyed by ring when ring
// encrypts p) and p with its args sealed under ring's current key when
// ring encrypts p; p has its defaults. The hash is taken first, from the
// plaintext, so that equal args make equal keys. A p that asks for
// encryption (EnqueueParams.Encrypt) without a ring is refused: its args
// are never stored in clear.
func sealed(p queue.EnqueueParams, ring *queue.KeyRing, now time.Time) (uniqueness, queue.EnqueueParams, error) {
	if p.Encrypt && ring == nil {
		return uniqueness{}, p, &queue.KeyError{Kind: p.Kind,
			Reason: "the args ask to be encrypted (EncryptedArgs or EnqueueParams.Encrypt) but the client has no encryption keys (Config.Encryption); nothing was inserted"}
	}
	u, err := uniqueOf(p, ring, now)
	if err != nil || !ring.Encrypts(p) {
		return u, p, err
	}
	if p.Args, err = ring.Seal(p.Kind, p.Args); err != nil {
		return uniqueness{}, p, err
	}
	return u, p, nil
}

// uniqueOf returns p's uniqueness, its hash keyed by ring when ring
// encrypts p; p has its defaults.
func uniqueOf(p queue.EnqueueParams, ring *queue.KeyRing, now time.Time) (uniqueness, error) {
	ins := untaggedInserts
	if len(p.Tags) > 0 {
		ins = taggedInserts
	}
	if p.Unique == nil && p.UniqueKey == "" {
		return uniqueness{insert: ins.plain}, nil
	}
	if p.Unique == nil {
		return uniqueness{insert: ins.keyed, existing: existingKeySQL, key: p.UniqueKey}, nil
	}
	h, err := p.UniqueHashFor(now, ring)
	if err != nil {
		return uniqueness{}, err
	}
	states := queue.StateBitmask(p.Unique.States())
	u := uniqueness{insert: ins.hashed, existing: existingHashSQL, hash: h, states: &states, key: h}
	if p.Unique.Debounce {
		u.insert = ins.debounced
	}
	return u, nil
}
