package pgqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
)

// Durable jobs (docs/durable.md): the steps a handler recorded, the timers
// of its sleeps and signal waits (steps too, named by the worker), and the
// signals sent to it. Every write of a step is fenced: it applies only
// while the job runs under the writer's fence, whose row the statement
// share-locks for its own duration (a rescue or a claim waits one
// statement at most), so that an attempt that lost its claim records
// nothing, and the job's primary key on (job, step) records a step once.

// fenceShareSQL selects the running job $1 under fence $2, share-locked:
// a rescue's or a cancel's update waits for the statement, and one that
// committed first fails the fence.
const fenceShareSQL = `SELECT id FROM jobfence_jobs WHERE id = $1 AND fence = $2 AND state = 'running' FOR SHARE`

// fenceTxSQL is fenceShareSQL for a step recorded in a transactional
// handler's transaction: the fenced completion that commits it locks the
// row (completeOneSQL), so the step needs no lock of its own, which a
// heartbeat would wait behind until the handler commits.
const fenceTxSQL = `SELECT id FROM jobfence_jobs WHERE id = $1 AND fence = $2 AND state = 'running'`

// loadStepsSQL reads job $1's recorded steps, with the database's clock
// (a timer's end is by it).
const loadStepsSQL = `
SELECT now(), coalesce((SELECT jsonb_object_agg(name, output) FROM jobfence_steps WHERE job_id = $1), '{}')`

// recordStepSQL records step $3 of job $1 with output $4 under fence $2,
// unless it is recorded already (the first record stays). It replies
// whether the fence held and what it inserted.
//
// transition: step
func recordStepSQL(fence string) string {
	return `
WITH j AS (` + fence + `), ins AS (
    INSERT INTO jobfence_steps (job_id, name, output, fence)
    SELECT id, $3, $4, $2 FROM j
    ON CONFLICT (job_id, name) DO NOTHING
    RETURNING output
)
SELECT EXISTS (SELECT FROM j), (SELECT output FROM ins)`
}

var (
	recordStepShareSQL = recordStepSQL(fenceShareSQL)
	recordStepTxSQL    = recordStepSQL(fenceTxSQL)
)

// timerSQL records timer $3 of job $1 under fence $2, ending at $5 or, if
// that is NULL, $4 microseconds from now by the database's clock, unless
// it is recorded already; it replies whether the fence held, the timer's
// end (the recorded one's, if it was) and the clock.
//
// transition: step
const timerSQL = `
WITH j AS (` + fenceShareSQL + `), ins AS (
    INSERT INTO jobfence_steps (job_id, name, output, fence)
    SELECT id, $3, jsonb_build_object('until', coalesce($5::timestamptz, now() + $4 * interval '1 microsecond')), $2 FROM j
    ON CONFLICT (job_id, name) DO NOTHING
    RETURNING output
)
SELECT EXISTS (SELECT FROM j),
    coalesce((SELECT output FROM ins), (SELECT output FROM jobfence_steps WHERE job_id = $1 AND name = $3)),
    now()`

// awaitSignalSQL is one signal wait's statement, for the wait recorded as
// step $3 of job $1 under fence $2, awaiting signal $4 for $5
// microseconds: it records the wait's timer ($3 || ':wait') at its first
// call; takes the oldest undelivered signal $4, if there is one, marking
// it delivered to this wait and recording its payload as the step, in
// one statement, so that a signal is delivered to one wait, and recorded
// by it, or to none; records the wait as timed out once its timer has
// ended with no signal. It replies whether the fence held, the step's
// output if it recorded one (the signal's or the timeout's), the timer's
// end and the clock. With no signal and the timer running, the caller
// suspends the job awaiting $4 (finishSQL's await).
//
// transition: step
const awaitSignalSQL = `
WITH j AS (` + fenceShareSQL + `), w AS (
    INSERT INTO jobfence_steps (job_id, name, output, fence)
    SELECT id, $3 || ':wait', jsonb_build_object('until', now() + $5 * interval '1 microsecond'), $2 FROM j
    ON CONFLICT (job_id, name) DO NOTHING
    RETURNING output
), u AS (
    SELECT (coalesce((SELECT output FROM w),
        (SELECT output FROM jobfence_steps WHERE job_id = $1 AND name = $3 || ':wait'))->>'until')::timestamptz AS until
), s AS (
    SELECT g.id FROM jobfence_signals g
    WHERE g.job_id = $1 AND g.name = $4 AND g.delivered_at IS NULL AND EXISTS (SELECT FROM j)
    ORDER BY g.id
    LIMIT 1
    FOR UPDATE OF g
), d AS (
    UPDATE jobfence_signals g SET delivered_at = now(), delivered_to = $3
    FROM s WHERE g.id = s.id
    RETURNING g.payload
), r AS (
    INSERT INTO jobfence_steps (job_id, name, output, fence)
    SELECT j.id, $3,
        CASE WHEN EXISTS (SELECT FROM d) THEN jsonb_build_object('signal', (SELECT payload FROM d))
             ELSE '{"timeout": true}'::jsonb END,
        $2
    FROM j, u
    WHERE EXISTS (SELECT FROM d) OR u.until <= now()
    ON CONFLICT (job_id, name) DO NOTHING
    RETURNING output
)
SELECT EXISTS (SELECT FROM j), (SELECT output FROM r), (SELECT until FROM u), now()`

// Steps implements worker.StepBackend: the recorded steps of job id and
// the database's clock.
func (c *Client) Steps(ctx context.Context, id int64) (map[string]json.RawMessage, time.Time, error) {
	var now time.Time
	var steps map[string]json.RawMessage
	if err := c.pool.QueryRow(ctx, loadStepsSQL, id).Scan(&now, &steps); err != nil {
		return nil, time.Time{}, fmt.Errorf("pgqueue: read the steps of job %d: %w", id, err)
	}
	return steps, now, nil
}

// RecordStep implements worker.StepBackend: it records output as step
// name of the job l leases, under l's fence, in tx if tx is not nil (a
// transactional handler's), and returns the output recorded: output, or
// the one an earlier record of the step stored. It returns a
// *queue.StaleFenceError when the fence is lost.
func (c *Client) RecordStep(ctx context.Context, tx pgx.Tx, l queue.Lease, name string, output []byte) (json.RawMessage, error) {
	var db DB = c.pool
	sql := recordStepShareSQL
	if tx != nil {
		db, sql = tx, recordStepTxSQL
	}
	var held bool
	var stored json.RawMessage
	if err := db.QueryRow(ctx, sql, l.ID, l.Fence, name, jsonbOutput(output)).Scan(&held, &stored); err != nil {
		return nil, fmt.Errorf("pgqueue: record step %q of job %d: %w", name, l.ID, err)
	}
	if !held {
		return nil, &queue.StaleFenceError{Lease: l}
	}
	if stored != nil {
		return stored, nil
	}
	// Recorded before: the first record stays, and the caller goes on
	// with it, as a later attempt would.
	if err := db.QueryRow(ctx, `SELECT output FROM jobfence_steps WHERE job_id = $1 AND name = $2`, l.ID, name).Scan(&stored); err != nil {
		return nil, fmt.Errorf("pgqueue: read step %q of job %d: %w", name, l.ID, err)
	}
	return stored, nil
}

// timerOutput is a timer's recorded output.
type timerOutput struct {
	Until time.Time `json:"until"`
}

// Timer implements worker.StepBackend: it records timer name of the job l
// leases under l's fence, ending at until or, if until is zero, d from
// now by the database's clock, unless it is recorded already, and returns
// the timer's end (the recorded one's) and the database's clock.
func (c *Client) Timer(ctx context.Context, l queue.Lease, name string, d time.Duration, until time.Time) (end, now time.Time, err error) {
	var held bool
	var out []byte
	var at *time.Time
	if !until.IsZero() {
		at = &until
	}
	if err := c.pool.QueryRow(ctx, timerSQL, l.ID, l.Fence, name, d.Microseconds(), at).Scan(&held, &out, &now); err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("pgqueue: record timer %q of job %d: %w", name, l.ID, err)
	}
	if !held {
		return time.Time{}, time.Time{}, &queue.StaleFenceError{Lease: l}
	}
	var t timerOutput
	if err := json.Unmarshal(out, &t); err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("pgqueue: timer %q of job %d: %w", name, l.ID, err)
	}
	return t.Until, now, nil
}

// AwaitSignal implements worker.StepBackend: one signal wait's statement
// (awaitSignalSQL), for the wait recorded as step name, awaiting signal
// for timeout. It returns the step's output if it recorded one (the
// signal's, {"signal": payload}, or the timeout's, {"timeout": true}),
// else nil, with the timer's end and the database's clock: the caller
// suspends the job until then, awaiting signal.
func (c *Client) AwaitSignal(ctx context.Context, l queue.Lease, name, signal string, timeout time.Duration) (out json.RawMessage, until, now time.Time, err error) {
	var held bool
	var end *time.Time
	if err := c.pool.QueryRow(ctx, awaitSignalSQL, l.ID, l.Fence, name, signal, timeout.Microseconds()).Scan(&held, &out, &end, &now); err != nil {
		return nil, time.Time{}, time.Time{}, fmt.Errorf("pgqueue: await signal %q of job %d: %w", signal, l.ID, err)
	}
	if !held || end == nil {
		return nil, time.Time{}, time.Time{}, &queue.StaleFenceError{Lease: l}
	}
	return out, *end, now, nil
}

// ErrJobFinished reports a Signal to a job that has finished (completed,
// discarded or cancelled): no wait of it would ever take the signal, so
// none is stored.
var ErrJobFinished = errors.New("jobfence: the job has finished; no wait of it would take the signal")

// MaxSignalBytes caps a signal's payload, as JSON.
const MaxSignalBytes = 1 << 20

// signalSQL stores signal $2 with payload $3 for job $1, or for the
// unfinished job holding unique key $4 when $1 is 0, unless it has
// finished; it replies with the job's ID. It locks nothing of the job's:
// the job's wait takes the signal when it runs, and a suspended wait is
// woken by the promoter's sweep (promoteSQL's signalled), which the
// caller runs at once (Signal) or the notification on channel $5 makes a
// worker run when the transaction commits (SignalTx), so that a caller's
// transaction holds up no worker, however long it stays open.
var signalSQL = `
WITH j AS (
    SELECT id FROM jobfence_jobs
    WHERE CASE WHEN $1::bigint <> 0 THEN id = $1 ELSE unique_key = $4 END
      AND state NOT IN ` + finalStatesSQL + `
), ins AS (
    INSERT INTO jobfence_signals (job_id, name, payload)
    SELECT id, $2, $3 FROM j
    RETURNING job_id
)
SELECT job_id, CASE WHEN $5 <> '' THEN pg_notify($5, job_id::text) END IS NULL FROM ins`

// signalChannel carries the IDs of jobs signalled in a caller's
// transaction (SignalTx): a worker's listener runs the promoter's sweep
// on it.
const signalChannel = "jobfence_signal"

// Signal sends signal name, with payload encoded as JSON, to job id: the
// job's next wait for name (worker's AwaitSignal) takes it, oldest
// first, each signal once; a job suspended in such a wait runs again at
// once. It returns an error wrapping queue.ErrJobNotFound for an unknown
// job and ErrJobFinished for a finished one.
func (c *Client) Signal(ctx context.Context, id int64, name string, payload any) error {
	if _, err := c.signal(ctx, c.pool, id, "", name, payload, ""); err != nil {
		return err
	}
	c.wakeSignalled(ctx)
	return nil
}

// SignalByKey is Signal to the unfinished job that holds unique key key
// (EnqueueParams.UniqueKey); it returns the job's ID.
func (c *Client) SignalByKey(ctx context.Context, key, name string, payload any) (int64, error) {
	if key == "" {
		return 0, fmt.Errorf("pgqueue: signal %q: %w: the unique key is empty", name, queue.ErrJobNotFound)
	}
	id, err := c.signal(ctx, c.pool, 0, key, name, payload, "")
	if err != nil {
		return 0, err
	}
	c.wakeSignalled(ctx)
	return id, nil
}

// SignalTx is Signal within tx: the signal is stored if and only if tx
// commits, and wakes a suspended wait then (a notification that a
// worker's listener takes, or, without one, the promoter's next sweep,
// worker.Config.PromoteInterval). It locks none of the job's rows, so an
// open tx holds up no worker.
func (c *Client) SignalTx(ctx context.Context, tx pgx.Tx, id int64, name string, payload any) error {
	_, err := c.signal(ctx, tx, id, "", name, payload, signalChannel)
	return err
}

// ErrBadSignal reports a signal name or payload that cannot be stored.
var ErrBadSignal = errors.New("jobfence: bad signal")

func (c *Client) signal(ctx context.Context, db DB, id int64, key, name string, payload any, channel string) (int64, error) {
	if name == "" || len(name) > 200 {
		return 0, fmt.Errorf("pgqueue: signal job %d: %w: the name must be 1 to 200 bytes, not %d", id, ErrBadSignal, len(name))
	}
	b, err := json.Marshal(payload)
	if err != nil {
		return 0, fmt.Errorf("pgqueue: signal %q to job %d: %w: the payload does not encode as JSON: %w", name, id, ErrBadSignal, err)
	}
	if len(b) > MaxSignalBytes {
		return 0, fmt.Errorf("pgqueue: signal %q to job %d: %w: the payload is %d bytes of JSON, more than %d; send a reference to it",
			name, id, ErrBadSignal, len(b), MaxSignalBytes)
	}
	var got int64
	var notified bool
	err = db.QueryRow(ctx, signalSQL, id, name, jsonbOutput(b), key, channel).Scan(&got, &notified)
	if errors.Is(err, pgx.ErrNoRows) {
		who := fmt.Sprintf("job %d", id)
		if id == 0 {
			return 0, fmt.Errorf("pgqueue: signal %q: no unfinished job holds unique key %q: %w", name, key, queue.ErrJobNotFound)
		}
		j, gerr := c.Get(ctx, id)
		if gerr != nil {
			return 0, fmt.Errorf("pgqueue: signal %q to %s: %w", name, who, gerr)
		}
		return 0, fmt.Errorf("pgqueue: signal %q to %s: it is %s: %w", name, who, j.State, ErrJobFinished)
	}
	if err != nil {
		return 0, fmt.Errorf("pgqueue: signal %q to job %d: %w", name, id, err)
	}
	return got, nil
}

// wakeSignalled runs the promoter's pass, whose sweep makes a job that
// awaits a signal just stored Ready (promoteSQL's signalled). A failure
// leaves it to the workers' promoters, within their PromoteInterval.
func (c *Client) wakeSignalled(ctx context.Context) {
	if _, err := c.Promote(ctx, signalWakeLimit); err != nil {
		c.cfg.Logger.Debug("jobfence: waking the job a signal awaits failed; the promoters will", "err", err)
	}
}

// signalWakeLimit bounds a Signal's promoter pass.
const signalWakeLimit = 100

// Signalled implements worker.SignalWaker: the channel receives a value
// when a caller's transaction that sent a signal (SignalTx) commits, so
// that the worker's promoter wakes the wait it may suspend at once. With
// Config.PollOnly, or while the LISTEN connection is down, it stays
// silent and the promoter's sweep wakes it within its interval.
func (c *Client) Signalled(ctx context.Context) (<-chan struct{}, error) {
	if c.cfg.PollOnly {
		return nil, nil
	}
	ch := make(chan struct{}, 1)
	c.listen(ctx, signalChannel, func(string) {
		select {
		case ch <- struct{}{}:
		default:
		}
	}, nil)
	return ch, nil
}
