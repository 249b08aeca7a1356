package pgqueue

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/jobfence/jobfence/internal/txbound"
	"github.com/jobfence/jobfence/queue"
)

// copyColumns are the columns EnqueueMany writes through COPY. The state
// and scheduled_at take their defaults ('available', the database's now()):
// a host clock that runs ahead must not delay the jobs.
var copyColumns = []string{"queue", "kind", "args", "priority", "max_attempts", "metadata", "trace_context",
	"idempotency_key", "deadline", "timeout_us", "delete_on_complete"}

// copyTaggedColumns are copyColumns and tags, for a batch whose plain jobs
// have tags: a batch without them copies no column more than before tags
// were.
var copyTaggedColumns = append(append([]string(nil), copyColumns...), "tags")

// insertManySQL inserts the jobs of a batch that COPY cannot: those with a
// unique key or a ScheduledAt (%[1]s: nothing; the conflict clause names
// the UniqueKey index) and those with UniqueOpts (%[1]s: their hashes and
// states; the clause names the computed key's index). DO NOTHING also
// skips a job whose key an earlier job of the same batch took.
//
// Jobs with tags go in statements that also name the tags column (%[5]s
// and %[6]s), with each job's tags joined by commas (no tag holds one:
// see queue.ValidateTags), since unnest cannot make rows of arrays.
//
// Each job's limit is found as limitOfSQL finds it ($13 the limit keys):
// a job a limit governs is inserted limited, and the statement returns the
// limits' partitions of the limited jobs it inserted.
//
// transition: insert
const insertManySQL = `
INSERT INTO jobfence_jobs (queue, kind, args, state, priority, scheduled_at, max_attempts, unique_key, metadata, trace_context,
                           idempotency_key, deadline, timeout_us, limit_name, limit_part, limit_fair, delete_on_complete%[1]s%[5]s)
SELECT q, k, a, CASE WHEN s > now() THEN 'scheduled' WHEN lim.name IS NOT NULL THEN 'limited' ELSE 'available' END,
    p, COALESCE(s, now()), m, NULLIF(u, ''), md, tc, ik, dl, tm, lim.name, lim.part, lim.fair, NULLIF(doc, false)%[2]s%[6]s
FROM unnest($1::text[], $2::text[], $3::jsonb[], $4::smallint[], $5::timestamptz[], $6::int[], $7::text[], $8::jsonb[], $9::bytea[],
            $10::uuid[], $11::timestamptz[], $12::bigint[], $13::text[], $14::boolean[]%[3]s%[7]s)
     AS t(q, k, a, p, s, m, u, md, tc, ik, dl, tm, lk, doc%[2]s%[8]s)
` + insertLimitSQL + `
ON CONFLICT %[4]s DO NOTHING
RETURNING state = 'limited', limit_name, limit_part`

// insertManyStatement returns insertManySQL for keyed or hashed jobs,
// with or without tags.
func insertManyStatement(hashed, tagged bool) string {
	args := []any{"", "", "", `(unique_key) WHERE unique_key IS NOT NULL`, "", "", "", ""}
	tagsParam := "$15"
	if hashed {
		args = []any{", unique_hash, unique_states", ", uh, us", ", $15::bytea[], $16::smallint[]", uniqueHashArbiter, "", "", "", ""}
		tagsParam = "$17"
	}
	if tagged {
		args[4], args[5], args[6], args[7] = ", tags", ", string_to_array(NULLIF(tg, ''), ',')", ", "+tagsParam+"::text[]", ", tg"
	}
	return fmt.Sprintf(insertManySQL, args...)
}

var (
	insertManyKeyedSQL        = insertManyStatement(false, false)
	insertManyHashedSQL       = insertManyStatement(true, false)
	insertManyKeyedTaggedSQL  = insertManyStatement(false, true)
	insertManyHashedTaggedSQL = insertManyStatement(true, true)
)

// limitedQueuesSQL says whether a limit governs any of the queues $1: the
// jobs of a batch then go through insertManySQL, which finds their
// limits, rather than COPY, which cannot.
const limitedQueuesSQL = `SELECT EXISTS (SELECT FROM jobfence_limits WHERE queue = ANY($1))`

// boundedBegin begins a transaction of statements that jobfence sends back
// to back, such as EnqueueMany's COPY and insert of the jobs with unique
// keys, which cannot be one statement, or ExplainClaim's claim and
// rollback. Bounded, it holds what it inserted and locked (unique keys
// that others wait for, claimed jobs) txbound.Idle past a client that
// froze between its statements, not for as long as it stays frozen.
var boundedBegin = txbound.Begin(txbound.Idle, txbound.LockWait)

// EnqueueMany inserts many jobs in one round trip and returns how many were
// inserted. Jobs to run now without unique keys go through COPY, the
// fastest path; jobs with unique keys, UniqueOpts or a ScheduledAt are
// inserted with ON CONFLICT DO NOTHING and are not counted when their key
// was taken, by a stored job or by an earlier job of ps. Jobs with
// UniqueOpts.Debounce are inserted one by one (a round trip each), in
// order, in the batch's transaction: a debounced duplicate is not counted.
func (c *Client) EnqueueMany(ctx context.Context, ps []queue.EnqueueParams) (int64, error) {
	return c.observe(ctx, ps, func(ctx context.Context, meta map[string]string) (int64, error) {
		// The batch is encoded before its transaction begins: the
		// transaction's idle bound (txbound) counts the time between its
		// statements, which a big batch's encoding on a busy machine could
		// otherwise fill.
		pl, err := planMany(ps, meta, c.cfg.Encryption)
		if err != nil {
			return 0, err
		}
		tx, err := c.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: boundedBegin})
		if err != nil {
			return 0, fmt.Errorf("pgqueue: enqueue many: %w", err)
		}
		defer tx.Rollback(ctx)
		n, queues, lims, err := pl.insert(ctx, tx, false)
		if err != nil {
			return 0, err
		}
		if err := tx.Commit(ctx); err != nil {
			return 0, fmt.Errorf("pgqueue: enqueue many: commit: %w", err)
		}
		if len(queues) > 0 {
			c.wakeAfterCommit(ctx, queues)
		}
		c.grantAfter(ctx, lims)
		return n, nil
	})
}

// EnqueueManyTx is EnqueueMany inside the caller's transaction.
func (c *Client) EnqueueManyTx(ctx context.Context, tx pgx.Tx, ps []queue.EnqueueParams) (int64, error) {
	return c.observe(ctx, ps, func(ctx context.Context, meta map[string]string) (int64, error) {
		// Limited jobs wait for the workers' next grant pass (see
		// EnqueueTx).
		pl, err := planMany(ps, meta, c.cfg.Encryption)
		if err != nil {
			return 0, err
		}
		n, _, _, err := pl.insert(ctx, tx, true)
		return n, err
	})
}

// manyPlan is a batch of jobs validated and encoded for insertMany: the
// plain jobs (for COPY), the keyed and hashed ones (insertManySQL), the
// debounced ones (one insert each), and the queues that get jobs ready.
type manyPlan struct {
	ps, plain        []queue.EnqueueParams
	meta             map[string]string
	plainKeys        []pgtype.UUID
	plainMD, plainTC [][]byte
	copyRows         [][]any // the plain jobs' rows for COPY
	copyCols         []string
	debounced        []int
	keyed, hashed    *manyRows
	queues           map[string]bool
	ring             *queue.KeyRing // seals the debounced jobs' args
}

// planMany validates and encodes ps, touching no database.
func planMany(ps []queue.EnqueueParams, meta map[string]string, ring *queue.KeyRing) (*manyPlan, error) {
	// Jobs without metadata of their own share the hook's, encoded once.
	shared, sharedTC, err := encodeMetadata(nil, meta)
	if err != nil {
		return nil, fmt.Errorf("pgqueue: enqueue many: %w", err)
	}
	now := time.Now()
	var plain []queue.EnqueueParams
	var plainKeys []pgtype.UUID
	var plainMD, plainTC [][]byte
	var debounced []int
	keyed, hashed := &manyRows{}, &manyRows{hashed: true}
	queues := map[string]bool{}
	keys := newJobKeys(len(ps))
	for i, p := range ps {
		p = p.WithDefaults()
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("pgqueue: enqueue many: job %d: %w", i, err)
		}
		if p.Unique != nil && p.Unique.Debounce {
			debounced = append(debounced, i)
			continue
		}
		u, p, err := sealed(p, ring, now)
		if err != nil {
			return nil, fmt.Errorf("pgqueue: enqueue many: job %d: %w", i, err)
		}
		md, tc := shared, sharedTC
		if len(p.Metadata) > 0 {
			if md, tc, err = encodeMetadata(p.Metadata, meta); err != nil {
				return nil, fmt.Errorf("pgqueue: enqueue many: job %d: %w", i, err)
			}
		}
		// A wake-up is only a hint (workers poll too), so the host's clock
		// may decide it; the job's own times come from the database's.
		if !p.ScheduledAt.After(now) {
			queues[p.Queue] = true
		}
		if p.UniqueKey == "" && p.Unique == nil && p.ScheduledAt.IsZero() && p.LimitKey == "" {
			plain, plainKeys = append(plain, p), append(plainKeys, keys[i])
			plainMD, plainTC = append(plainMD, md), append(plainTC, tc)
			continue
		}
		rows := keyed
		if p.Unique != nil {
			rows = hashed
			rows.uh = append(rows.uh, u.hash)
			rows.us = append(rows.us, queue.StateBitmask(p.Unique.States()))
		}
		rows.add(p, md, tc, keys[i])
	}
	copyRows := make([][]any, len(plain))
	cols := copyColumns
	for i, p := range plain {
		copyRows[i] = []any{p.Queue, p.Kind, p.Args, int16(p.Priority), int32(p.MaxAttempts), plainMD[i], plainTC[i],
			plainKeys[i], deadlineParam(p.Deadline), timeoutParam(p.Timeout), deleteParam(p.DeleteOnComplete)}
		if len(p.Tags) > 0 {
			cols = copyTaggedColumns
		}
	}
	if len(cols) > len(copyColumns) {
		// A tags column for every row, NULL for a job without tags.
		for i, p := range plain {
			var tags []string
			if len(p.Tags) > 0 {
				tags = queue.MergeTags(p.Tags, nil)
			}
			copyRows[i] = append(copyRows[i], tags)
		}
	}
	return &manyPlan{ps: ps, plain: plain, meta: meta, plainKeys: plainKeys, plainMD: plainMD, plainTC: plainTC,
		copyRows: copyRows, copyCols: cols, debounced: debounced, keyed: keyed, hashed: hashed, queues: queues, ring: ring}, nil
}

// insert inserts the plan's jobs in tx and returns how many it inserted,
// the queues that got jobs ready now, which it notifies in tx when notify
// is set, and the limits' partitions that got limited jobs.
func (pl *manyPlan) insert(ctx context.Context, tx pgx.Tx, notify bool) (int64, []string, []partition, error) {
	ps, meta, plain, keyed, hashed, queues := pl.ps, pl.meta, pl.plain, pl.keyed, pl.hashed, pl.queues
	plainMD, plainTC, plainKeys := pl.plainMD, pl.plainTC, pl.plainKeys
	var n int64
	if len(plain) > 0 {
		// COPY cannot find a job's limit: a batch with a queue that has
		// one goes through insertManySQL whole.
		var limited bool
		names := make([]string, 0, len(plain))
		for _, p := range plain {
			names = append(names, p.Queue)
		}
		if err := tx.QueryRow(ctx, limitedQueuesSQL, distinct(names)).Scan(&limited); err != nil {
			return 0, nil, nil, fmt.Errorf("pgqueue: enqueue many: look up limits: %w", err)
		}
		if limited {
			for i, p := range plain {
				keyed.add(p, plainMD[i], plainTC[i], plainKeys[i])
			}
		} else {
			copied, err := tx.CopyFrom(ctx, pgx.Identifier{"jobfence_jobs"}, pl.copyCols, pgx.CopyFromRows(pl.copyRows))
			if err != nil {
				return 0, nil, nil, fmt.Errorf("pgqueue: enqueue many: copy: %w", err)
			}
			n += copied
		}
	}
	// The partitions the inserted jobs came under, once each.
	var lims partitionSet
	addLim := func(l *partition) {
		if l != nil {
			lims.add(*l)
		}
	}
	for _, rows := range []*manyRows{keyed, hashed} {
		if len(rows.q) == 0 {
			continue
		}
		inserted, err := rows.insert(ctx, tx, addLim)
		if err != nil {
			return 0, nil, nil, fmt.Errorf("pgqueue: enqueue many: insert: %w", err)
		}
		n += inserted
	}
	for _, i := range pl.debounced {
		res, ready, lim, err := enqueue(ctx, tx, ps[i], meta, "", pl.ring)
		if err != nil {
			return 0, nil, nil, fmt.Errorf("pgqueue: enqueue many: job %d: %w", i, err)
		}
		if res.Inserted {
			n++
		}
		if ready {
			queues[ps[i].WithDefaults().Queue] = true
		}
		addLim(lim)
	}
	names := make([]string, 0, len(queues))
	for q := range queues {
		names = append(names, q)
	}
	if notify && len(names) > 0 {
		if _, err := tx.Exec(ctx, notifySQL, insertChannel, names); err != nil {
			return 0, nil, nil, fmt.Errorf("pgqueue: enqueue many: notify: %w", err)
		}
	}
	return n, names, lims.list, nil
}

// manyRows are the columns of the jobs of a batch that insertManySQL
// inserts; hashed ones also have their unique hashes and states.
type manyRows struct {
	hashed  bool
	q, k, u []string
	a       [][]byte
	p       []int16
	s       []*time.Time
	m       []int32
	md, tc  [][]byte
	ik      []pgtype.UUID
	dl      []*time.Time
	tm      []*int64
	lk      []string
	doc     []bool
	uh      [][]byte
	us      []int16
	// tg holds each job's tags joined by commas ("" for none); tagged
	// says whether any job has some.
	tg     []string
	tagged bool
}

// add appends p (with its defaults), its encoded metadata and its
// idempotency key.
func (r *manyRows) add(p queue.EnqueueParams, md, tc []byte, key pgtype.UUID) {
	r.q = append(r.q, p.Queue)
	r.k = append(r.k, p.Kind)
	r.a = append(r.a, p.Args)
	r.p = append(r.p, int16(p.Priority))
	if p.ScheduledAt.IsZero() {
		r.s = append(r.s, nil) // the database's now(), as for single inserts
	} else {
		at := p.ScheduledAt
		r.s = append(r.s, &at)
	}
	r.m = append(r.m, int32(p.MaxAttempts))
	r.u = append(r.u, p.UniqueKey)
	r.md = append(r.md, md)
	r.tc = append(r.tc, tc)
	r.ik = append(r.ik, key)
	r.dl = append(r.dl, deadlineParam(p.Deadline))
	r.tm = append(r.tm, timeoutParam(p.Timeout))
	r.lk = append(r.lk, p.LimitKey)
	r.doc = append(r.doc, p.DeleteOnComplete)
	switch {
	case len(p.Tags) > 0:
		// The rows before the first tagged one have none.
		for len(r.tg) < len(r.q)-1 {
			r.tg = append(r.tg, "")
		}
		r.tg = append(r.tg, strings.Join(queue.MergeTags(p.Tags, nil), ","))
		r.tagged = true
	case r.tagged:
		r.tg = append(r.tg, "")
	}
}

// deleteParam is DeleteOnComplete as stored: true, or NULL for false (a
// bit of the row's null bitmap rather than a byte).
func deleteParam(del bool) *bool {
	if !del {
		return nil
	}
	return &del
}

// insert inserts the rows in one statement and returns how many it
// inserted, calling limited with the partition of each limited job.
func (r *manyRows) insert(ctx context.Context, tx pgx.Tx, limited func(*partition)) (int64, error) {
	args := []any{r.q, r.k, r.a, r.p, r.s, r.m, r.u, r.md, r.tc, r.ik, r.dl, r.tm, r.lk, r.doc}
	q := insertManyKeyedSQL
	if r.hashed {
		q = insertManyHashedSQL
		args = append(args, r.uh, r.us)
	}
	if r.tagged {
		q = insertManyKeyedTaggedSQL
		if r.hashed {
			q = insertManyHashedTaggedSQL
		}
		args = append(args, r.tg)
	}
	rows, err := tx.Query(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var n int64
	for rows.Next() {
		var isLimited bool
		var name, part *string
		if err := rows.Scan(&isLimited, &name, &part); err != nil {
			return 0, err
		}
		n++
		if isLimited && name != nil && part != nil {
			limited(&partition{*name, *part})
		}
	}
	return n, rows.Err()
}
