package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/internal/txbound"
)

// UniqueKey returns the unique key of the job of schedule name's fire at t:
// cron:<name>:<t's Unix time>. Every instance derives the same key from the
// same fire.
func UniqueKey(name string, t time.Time) string {
	return keyPrefix(name) + strconv.FormatInt(t.Unix(), 10)
}

// TriggerKey returns the unique key of the job of a Trigger of schedule
// name at t: cron:<name>:<t's Unix time>-run, apart from the key of a fire
// of the spec at the same second.
func TriggerKey(name string, t time.Time) string {
	return UniqueKey(name, t) + triggerSuffix
}

const triggerSuffix = "-run"

func keyPrefix(name string) string { return "cron:" + name + ":" }

// selectScheduleSQL reads the stored definition of schedule $1, and
// whether its args equal $2 as jsonb (which prints its own spacing and key
// order).
const selectScheduleSQL = `
SELECT spec, time_zone, kind, queue, catch_up, skip_if_running,
       coalesce(args::text, ''), coalesce(args = $2::jsonb, false), coalesce(priority, 0), coalesce(max_attempts, 0),
       coalesce((extract(epoch FROM catch_up_window) * 1000000)::bigint, 0), origin
FROM jobfence_schedules WHERE name = $1`

// definitionChanged is true, in an upsert of jobfence_schedules AS s, when
// EXCLUDED's definition differs from the stored one.
const definitionChanged = `(s.spec, s.time_zone, s.kind, s.queue, s.catch_up, s.skip_if_running,
      s.args, s.priority, s.max_attempts, s.catch_up_window)
      IS DISTINCT FROM (EXCLUDED.spec, EXCLUDED.time_zone, EXCLUDED.kind, EXCLUDED.queue, EXCLUDED.catch_up,
      EXCLUDED.skip_if_running, EXCLUDED.args, EXCLUDED.priority, EXCLUDED.max_attempts, EXCLUDED.catch_up_window)`

// registerSQL writes the definition of a schedule defined in code; the last
// writer wins, and the schedule becomes one of origin code whatever it was.
// updated_at and version move only when the definition changes; the
// paused state is kept.
const registerSQL = `
INSERT INTO jobfence_schedules AS s (name, spec, time_zone, kind, queue, catch_up, skip_if_running, next_fire,
    args, priority, max_attempts, catch_up_window, origin, version)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10, $11, $12::bigint * interval '1 microsecond', 'code',
        nextval('jobfence_schedules_version'))
ON CONFLICT (name) DO UPDATE SET
    spec = EXCLUDED.spec, time_zone = EXCLUDED.time_zone, kind = EXCLUDED.kind, queue = EXCLUDED.queue,
    catch_up = EXCLUDED.catch_up, skip_if_running = EXCLUDED.skip_if_running, args = EXCLUDED.args,
    priority = EXCLUDED.priority, max_attempts = EXCLUDED.max_attempts, catch_up_window = EXCLUDED.catch_up_window,
    origin = EXCLUDED.origin,
    next_fire = CASE WHEN s.last_fire IS NULL OR EXCLUDED.next_fire > s.last_fire
                     THEN EXCLUDED.next_fire ELSE s.next_fire END,
    version = CASE WHEN ` + definitionChanged + ` OR s.origin <> EXCLUDED.origin THEN EXCLUDED.version ELSE s.version END,
    updated_at = CASE WHEN ` + definitionChanged + ` OR s.origin <> EXCLUDED.origin THEN now() ELSE s.updated_at END`

// definition is what a schedule's row says about it.
type definition struct {
	spec, timeZone, kind, queue, catchUp string
	skipIfRunning                        bool
	args                                 string
	priority, maxAttempts                int
	window                               time.Duration
	origin                               string
}

func (sc *schedule) definition() definition {
	return definition{
		spec: sc.specStr, timeZone: sc.spec.Location().String(), kind: sc.params.Kind,
		queue: sc.params.Queue, catchUp: sc.catchUp.policy.String(), skipIfRunning: sc.skip,
		args: string(sc.params.Args), priority: sc.params.Priority, maxAttempts: sc.params.MaxAttempts,
		window: sc.window, origin: originCode,
	}
}

// The origins of a schedule's row.
const (
	// originCode: defined in code (Add) by the instances that fire it.
	originCode = "code"
	// originRuntime: added while the fleet runs (Put); every instance
	// fires it.
	originRuntime = "runtime"
)

// windowParam is a catch-up window as registerSQL and putSQL take it:
// microseconds, NULL for the default.
func windowParam(d time.Duration) *int64 {
	if d <= 0 {
		return nil
	}
	us := d.Microseconds()
	return &us
}

// register writes the row of sc, a schedule defined in code.
func (s *Scheduler) register(ctx context.Context, sc *schedule, now time.Time) error {
	pool := s.client.Pool()
	def := sc.definition()
	var old definition
	var window int64
	var sameArgs bool
	err := pool.QueryRow(ctx, selectScheduleSQL, sc.name, def.args).Scan(
		&old.spec, &old.timeZone, &old.kind, &old.queue, &old.catchUp, &old.skipIfRunning,
		&old.args, &sameArgs, &old.priority, &old.maxAttempts, &window, &old.origin)
	old.window = time.Duration(window) * time.Microsecond
	if sameArgs {
		old.args = def.args
	}
	found := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("schedule %q: read: %w", sc.name, err)
	}
	next := sc.spec.Next(now)
	if _, err := pool.Exec(ctx, registerSQL, sc.name, def.spec, def.timeZone, def.kind, def.queue,
		def.catchUp, def.skipIfRunning, nullTime(next), def.args, def.priority, def.maxAttempts, windowParam(def.window)); err != nil {
		return fmt.Errorf("schedule %q: register: %w", sc.name, err)
	}
	switch {
	case !found:
		s.logger.Info("scheduler: schedule registered", "schedule", sc.name, "spec", def.spec, "time_zone", def.timeZone, "kind", def.kind)
	case old != def:
		s.logger.Info("scheduler: schedule definition changed; this instance's definition replaces the stored one",
			"schedule", sc.name,
			"old_spec", old.spec, "spec", def.spec,
			"old_time_zone", old.timeZone, "time_zone", def.timeZone,
			"old_kind", old.kind, "kind", def.kind,
			"old_queue", old.queue, "queue", def.queue,
			"old_catch_up", old.catchUp, "catch_up", def.catchUp,
			"old_skip_if_running", old.skipIfRunning, "skip_if_running", def.skipIfRunning,
			"old_args", old.args, "args", def.args,
			"old_priority", old.priority, "priority", def.priority,
			"old_max_attempts", old.maxAttempts, "max_attempts", def.maxAttempts,
			"old_catch_up_window", old.window, "catch_up_window", def.window,
			"old_origin", old.origin, "origin", def.origin)
	}
	return nil
}

// fireBounds returns the BEGIN of a fire's transaction for an
// EnqueueTimeout of timeout. The server ends the transaction once it sits
// idle txbound.Idle, or timeout if shorter: a client frozen mid-fire (a
// paused process) commits nothing, and the fire's unique key and the
// schedule's row, which every other instance's fire of the schedule waits
// for, are free again soon, rather than timeout later. A lock wait (no
// sign of a frozen client: another fire may hold the row) may last
// timeout, as the client's own context allows it.
func fireBounds(timeout time.Duration) string {
	return txbound.Begin(min(timeout, txbound.Idle), timeout)
}

// unfinishedSQL finds a job that is not final of a fire of the schedule
// whose key prefix is $1 earlier than the Unix time $2: the earliest such
// fire's job.
//
// "Earlier" is decided by the fire time in the key (cron:<name>:<unix>, or
// cron:<name>:<unix>-run for a Trigger, whose run counts too), never by
// scheduled_at: a retry, a snooze, a rescue or an admin retry moves a job's
// scheduled_at forward, past later fires, and its fire must still count as
// earlier. The CASE guards the cast (Postgres does not evaluate AND terms in
// order); keys of 19 or more digits are not fires and are ignored rather
// than overflowing bigint.
//
// The prefix is matched with a range on unique_key, with the predicate of
// the partial index jobfence_jobs_unfinished_key (migration 00002), which
// serves it, so the scan covers only this schedule's unfinished jobs;
// starts_with or LIKE would scan the whole table, as the index is not
// text_pattern_ops. Under the C collation the range holds exactly the keys
// with the prefix; under a linguistic one a key with the prefix still sorts
// at or after the prefix, and one whose suffix starts with a digit or '-'
// before prefix || 'A' (digits sort before letters in every collation), so no
// fire's key falls outside it; starts_with then drops any other key the
// range admits.
const unfinishedSQL = `
SELECT id FROM (
    SELECT id, CASE WHEN substr(unique_key, length($1) + 1) ~ '^-?[0-9]{1,18}(-run)?$'
                    THEN substring(substr(unique_key, length($1) + 1) FROM '^-?[0-9]{1,18}')::bigint END AS fire
    FROM jobfence_jobs
    WHERE unique_key IS NOT NULL AND unique_key >= $1 AND unique_key < $1 || 'A'
      AND starts_with(unique_key, $1) AND state NOT IN ('completed', 'discarded', 'cancelled')
) j
WHERE fire < $2
ORDER BY fire, id LIMIT 1`

// skipSQL cancels a fire's job just inserted in the same transaction.
const skipSQL = `
UPDATE jobfence_jobs
SET state = 'cancelled', finalized_at = now(),
    errors = errors || jsonb_build_array(jsonb_build_object('attempt', 0, 'at', now(), 'error', $2::text))
WHERE id = $1`

// gateSQL locks the schedule's row for a fire's transaction and reads what
// decides whether the fire may be enqueued: the row's version and whether
// it is paused; and the database's clock. A Pause, a Put or a Delete
// waits for the lock, so a fire is either enqueued before the change
// commits or sees it: no instance enqueues a fire of a paused, replaced or
// deleted schedule after the change, however stale its view of the table.
// FOR NO KEY UPDATE, as advanceSQL's update takes, so that fires of the
// same schedule do not deadlock upgrading a shared lock.
const gateSQL = `SELECT version, paused_at IS NOT NULL, now() FROM jobfence_schedules WHERE name = $1 FOR NO KEY UPDATE`

// errChanged reports a fire refused because its schedule's row no longer
// says what the instance fired it from: paused, replaced by another
// version, or deleted.
var errChanged = errors.New("the schedule changed in the table")

// advanceSQL records the schedule's last enqueued fire; it only moves
// forward. The fire's transaction holds the row (gateSQL) and has checked
// that its definition is the stored one.
const advanceSQL = `
UPDATE jobfence_schedules SET last_fire = $2, next_fire = $3
WHERE name = $1 AND (last_fire IS NULL OR last_fire < $2)`

// enqueue inserts the jobs of fires (oldest first) in one transaction,
// together with the schedule's last enqueued fire, within EnqueueTimeout.
// It returns an error wrapping errChanged, and enqueues nothing, when the
// schedule's row is paused, has another version than sc, or is gone.
func (s *Scheduler) enqueue(ctx context.Context, sc *schedule, fires []time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.EnqueueTimeout)
	defer cancel()
	tx, err := s.client.Pool().BeginTx(ctx, pgx.TxOptions{BeginQuery: fireBounds(s.cfg.EnqueueTimeout)})
	if err != nil {
		return fmt.Errorf("schedule %q: begin: %w", sc.name, err)
	}
	defer tx.Rollback(ctx)
	var version int64
	var paused bool
	var dbNow time.Time
	switch err := tx.QueryRow(ctx, gateSQL, sc.name).Scan(&version, &paused, &dbNow); {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("schedule %q: %w: deleted", sc.name, errChanged)
	case err != nil:
		return fmt.Errorf("schedule %q: read its row: %w", sc.name, err)
	case paused:
		return fmt.Errorf("schedule %q: %w: paused", sc.name, errChanged)
	case version != sc.version:
		return fmt.Errorf("schedule %q: %w: version %d, this instance fires version %d", sc.name, errChanged, version, sc.version)
	}
	oldest := dbNow.Add(-s.cfg.Retention)
	var events []Fire
	var last time.Time
	for _, t := range fires {
		if !t.After(oldest) {
			s.logger.Warn("scheduler: fire older than the job retention by the database's clock not enqueued: its job may have been pruned",
				"schedule", sc.name, "fire", t, "retention", s.cfg.Retention)
			continue
		}
		var unfinished int64
		if sc.skip {
			err := tx.QueryRow(ctx, unfinishedSQL, keyPrefix(sc.name), t.Unix()).Scan(&unfinished)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("schedule %q: fire %s: look for an unfinished run: %w", sc.name, t.Format(time.RFC3339), err)
			}
		}
		p := sc.params
		p.ScheduledAt, p.UniqueKey = t, UniqueKey(sc.name, t)
		res, err := s.client.EnqueueTx(ctx, tx, p)
		if err != nil {
			return fmt.Errorf("schedule %q: fire %s: %w", sc.name, t.Format(time.RFC3339), err)
		}
		ev := Fire{Schedule: sc.name, At: t, JobID: res.ID, Inserted: res.Inserted}
		if res.Inserted {
			last = t
			if unfinished != 0 {
				reason := fmt.Sprintf("skipped: job %d of an earlier fire of schedule %q has not finished (SkipIfRunning)", unfinished, sc.name)
				if _, err := tx.Exec(ctx, skipSQL, res.ID, reason); err != nil {
					return fmt.Errorf("schedule %q: fire %s: skip: %w", sc.name, t.Format(time.RFC3339), err)
				}
				ev.Skipped = true
			}
		}
		events = append(events, ev)
	}
	if !last.IsZero() {
		if _, err := tx.Exec(ctx, advanceSQL, sc.name, last, nullTime(sc.spec.Next(last))); err != nil {
			return fmt.Errorf("schedule %q: record last fire: %w", sc.name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("schedule %q: commit: %w", sc.name, err)
	}
	for _, ev := range events {
		if ev.Inserted {
			s.logger.Debug("scheduler: fire enqueued", "schedule", ev.Schedule, "fire", ev.At, "job", ev.JobID, "skipped", ev.Skipped)
		}
		if s.cfg.OnFire != nil {
			s.cfg.OnFire(ev)
		}
	}
	return nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Info is a schedule as the schedules table records it.
type Info struct {
	Name          string
	Spec          string
	TimeZone      string
	Kind          string
	Queue         string
	CatchUp       string
	SkipIfRunning bool
	// Args are the jobs' arguments, as JSON; Priority and MaxAttempts their
	// settings. They are empty and zero for a schedule registered by a
	// release before run-time schedules, until an instance of this one
	// that defines it starts.
	Args        json.RawMessage
	Priority    int
	MaxAttempts int
	// CatchUpWindow is Options.CatchUpWindow; zero means the default, half
	// of each instance's Config.Retention.
	CatchUpWindow time.Duration
	// Runtime is true for a schedule added while the fleet runs (Put),
	// which every instance fires, and false for one defined in code (Add),
	// which the instances that define it fire.
	Runtime bool
	// Paused is true while the schedule is paused: since PausedAt, by
	// PausedBy.
	Paused   bool
	PausedAt time.Time
	PausedBy string
	// NextFire is the fire after LastFire (or after registration); zero
	// when the spec never fires again.
	NextFire time.Time
	// LastFire is the latest fire whose job was enqueued; zero if none.
	LastFire time.Time
	// TriggeredAt is the fire time of the latest Trigger; zero if none.
	TriggeredAt time.Time
	// CreatedAt is when the name was first registered; UpdatedAt when its
	// definition, or whether it is paused, last changed.
	CreatedAt time.Time
	UpdatedAt time.Time
}

const listSQL = `
SELECT name, spec, time_zone, kind, queue, catch_up, skip_if_running, args, coalesce(priority, 0), coalesce(max_attempts, 0),
       coalesce((extract(epoch FROM catch_up_window) * 1000000)::bigint, 0), origin, paused_at, coalesce(paused_by, ''),
       next_fire, last_fire, triggered_at, created_at, updated_at
FROM jobfence_schedules`

// List returns the schedules recorded in the schedules table that pool's
// search_path reaches, by name.
func List(ctx context.Context, pool *pgxpool.Pool) ([]Info, error) {
	rows, err := pool.Query(ctx, listSQL+` ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("scheduler: list: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanInfo)
	if err != nil {
		return nil, fmt.Errorf("scheduler: list: %w", err)
	}
	return out, nil
}

// Get returns the schedule name as the schedules table records it, or an
// error wrapping ErrNotFound.
func Get(ctx context.Context, pool *pgxpool.Pool, name string) (Info, error) {
	rows, err := pool.Query(ctx, listSQL+` WHERE name = $1`, name)
	if err != nil {
		return Info{}, fmt.Errorf("scheduler: get %q: %w", name, err)
	}
	i, err := pgx.CollectExactlyOneRow(rows, scanInfo)
	if errors.Is(err, pgx.ErrNoRows) {
		return Info{}, fmt.Errorf("scheduler: get %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return Info{}, fmt.Errorf("scheduler: get %q: %w", name, err)
	}
	return i, nil
}

func scanInfo(row pgx.CollectableRow) (Info, error) {
	var i Info
	var args []byte
	var window int64
	var origin string
	var pausedAt, next, last, triggered *time.Time
	err := row.Scan(&i.Name, &i.Spec, &i.TimeZone, &i.Kind, &i.Queue, &i.CatchUp, &i.SkipIfRunning,
		&args, &i.Priority, &i.MaxAttempts, &window, &origin, &pausedAt, &i.PausedBy,
		&next, &last, &triggered, &i.CreatedAt, &i.UpdatedAt)
	if args != nil {
		i.Args = json.RawMessage(args)
	}
	i.CatchUpWindow = time.Duration(window) * time.Microsecond
	i.Runtime = origin == originRuntime
	i.Paused = pausedAt != nil
	for _, t := range []struct {
		dst *time.Time
		src *time.Time
	}{{&i.PausedAt, pausedAt}, {&i.NextFire, next}, {&i.LastFire, last}, {&i.TriggeredAt, triggered}} {
		if t.src != nil {
			*t.dst = *t.src
		}
	}
	return i, err
}
