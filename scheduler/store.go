package scheduler

import (
	"context"
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

func keyPrefix(name string) string { return "cron:" + name + ":" }

const selectScheduleSQL = `
SELECT spec, time_zone, kind, queue, catch_up, skip_if_running, last_fire
FROM jobfence_schedules WHERE name = $1`

// registerSQL writes a schedule's definition; the last writer wins.
// updated_at moves only when the definition changes.
const registerSQL = `
INSERT INTO jobfence_schedules AS s (name, spec, time_zone, kind, queue, catch_up, skip_if_running, next_fire)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (name) DO UPDATE SET
    spec = EXCLUDED.spec, time_zone = EXCLUDED.time_zone, kind = EXCLUDED.kind, queue = EXCLUDED.queue,
    catch_up = EXCLUDED.catch_up, skip_if_running = EXCLUDED.skip_if_running,
    next_fire = CASE WHEN s.last_fire IS NULL OR EXCLUDED.next_fire > s.last_fire
                     THEN EXCLUDED.next_fire ELSE s.next_fire END,
    updated_at = CASE WHEN (s.spec, s.time_zone, s.kind, s.queue, s.catch_up, s.skip_if_running)
                           IS DISTINCT FROM (EXCLUDED.spec, EXCLUDED.time_zone, EXCLUDED.kind, EXCLUDED.queue,
                                             EXCLUDED.catch_up, EXCLUDED.skip_if_running)
                      THEN now() ELSE s.updated_at END`

// definition is what a schedule's row says about it.
type definition struct {
	spec, timeZone, kind, queue, catchUp string
	skipIfRunning                        bool
}

func (sc *schedule) definition() definition {
	return definition{
		spec: sc.specStr, timeZone: sc.spec.Location().String(), kind: sc.params.Kind,
		queue: sc.params.Queue, catchUp: sc.catchUp.policy.String(), skipIfRunning: sc.skip,
	}
}

// register writes sc's row and returns its last enqueued fire, if any.
func (s *Scheduler) register(ctx context.Context, sc *schedule, now time.Time) (*time.Time, error) {
	pool := s.client.Pool()
	var old definition
	var last *time.Time
	err := pool.QueryRow(ctx, selectScheduleSQL, sc.name).Scan(
		&old.spec, &old.timeZone, &old.kind, &old.queue, &old.catchUp, &old.skipIfRunning, &last)
	found := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("schedule %q: read: %w", sc.name, err)
	}
	def := sc.definition()
	next := sc.spec.Next(now)
	if _, err := pool.Exec(ctx, registerSQL, sc.name, def.spec, def.timeZone, def.kind, def.queue,
		def.catchUp, def.skipIfRunning, nullTime(next)); err != nil {
		return nil, fmt.Errorf("schedule %q: register: %w", sc.name, err)
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
			"old_skip_if_running", old.skipIfRunning, "skip_if_running", def.skipIfRunning)
	}
	return last, nil
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
// "Earlier" is decided by the fire time in the key (cron:<name>:<unix>),
// never by scheduled_at: a retry, a snooze, a rescue or an admin retry moves
// a job's scheduled_at forward, past later fires, and its fire must still
// count as earlier. The CASE guards the cast (Postgres does not evaluate AND
// terms in order); keys of 19 or more digits are not fires and are ignored
// rather than overflowing bigint.
//
// The prefix is matched with a range on unique_key, with the predicate of
// the partial index jobfence_jobs_unfinished_key (migration 00002), which
// serves it, so the scan covers only this schedule's unfinished jobs;
// starts_with or LIKE would scan the whole table, as the index is not
// text_pattern_ops. Under the C collation the range holds exactly the keys
// with the prefix; under a linguistic one a key with the prefix still sorts
// at or after the prefix, and one whose suffix is digits and '-' before
// prefix || 'A' (digits sort before letters in every collation), so no
// fire's key falls outside it; starts_with then drops any other key the
// range admits.
const unfinishedSQL = `
SELECT id FROM (
    SELECT id, CASE WHEN substr(unique_key, length($1) + 1) ~ '^-?[0-9]{1,18}$'
                    THEN substr(unique_key, length($1) + 1)::bigint END AS fire
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

// advanceSQL records the schedule's last enqueued fire; it only moves
// forward. next_fire is written only by an instance whose definition is the
// stored one.
const advanceSQL = `
INSERT INTO jobfence_schedules AS s (name, spec, time_zone, kind, queue, catch_up, skip_if_running, next_fire, last_fire)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (name) DO UPDATE SET
    last_fire = EXCLUDED.last_fire,
    next_fire = CASE WHEN s.spec = EXCLUDED.spec AND s.time_zone = EXCLUDED.time_zone
                     THEN EXCLUDED.next_fire ELSE s.next_fire END
WHERE s.last_fire IS NULL OR s.last_fire < EXCLUDED.last_fire`

// enqueue inserts the jobs of fires (oldest first) in one transaction,
// together with the schedule's last enqueued fire, within EnqueueTimeout.
func (s *Scheduler) enqueue(ctx context.Context, sc *schedule, fires []time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.EnqueueTimeout)
	defer cancel()
	tx, err := s.client.Pool().BeginTx(ctx, pgx.TxOptions{BeginQuery: fireBounds(s.cfg.EnqueueTimeout)})
	if err != nil {
		return fmt.Errorf("schedule %q: begin: %w", sc.name, err)
	}
	defer tx.Rollback(ctx)
	var dbNow time.Time
	if err := tx.QueryRow(ctx, "SELECT now()").Scan(&dbNow); err != nil {
		return fmt.Errorf("schedule %q: read the database's clock: %w", sc.name, err)
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
		def := sc.definition()
		if _, err := tx.Exec(ctx, advanceSQL, sc.name, def.spec, def.timeZone, def.kind, def.queue,
			def.catchUp, def.skipIfRunning, nullTime(sc.spec.Next(last)), last); err != nil {
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
	// NextFire is the fire after LastFire (or after registration); zero
	// when the spec never fires again.
	NextFire time.Time
	// LastFire is the latest fire whose job was enqueued; zero if none.
	LastFire time.Time
	// CreatedAt is when the name was first registered; UpdatedAt when its
	// definition last changed.
	CreatedAt time.Time
	UpdatedAt time.Time
}

const listSQL = `
SELECT name, spec, time_zone, kind, queue, catch_up, skip_if_running, next_fire, last_fire, created_at, updated_at
FROM jobfence_schedules ORDER BY name`

// List returns the schedules recorded in the schedules table that pool's
// search_path reaches, by name.
func List(ctx context.Context, pool *pgxpool.Pool) ([]Info, error) {
	rows, err := pool.Query(ctx, listSQL)
	if err != nil {
		return nil, fmt.Errorf("scheduler: list: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Info, error) {
		var i Info
		var next, last *time.Time
		err := row.Scan(&i.Name, &i.Spec, &i.TimeZone, &i.Kind, &i.Queue, &i.CatchUp, &i.SkipIfRunning,
			&next, &last, &i.CreatedAt, &i.UpdatedAt)
		if next != nil {
			i.NextFire = *next
		}
		if last != nil {
			i.LastFire = *last
		}
		return i, err
	})
	if err != nil {
		return nil, fmt.Errorf("scheduler: list: %w", err)
	}
	return out, nil
}

const deleteSQL = `DELETE FROM jobfence_schedules WHERE name = $1`

// Delete removes the schedule name from the schedules table, for a schedule
// that no instance registers any more; it reports whether there was one. The
// jobs of its fires are left alone. An instance that still registers name
// writes the row again at its next fire, but without the last enqueued fire
// that anchored its catch-up; unique keys still keep each fire one job.
func Delete(ctx context.Context, pool *pgxpool.Pool, name string) (bool, error) {
	tag, err := pool.Exec(ctx, deleteSQL, name)
	if err != nil {
		return false, fmt.Errorf("scheduler: delete %q: %w", name, err)
	}
	return tag.RowsAffected() == 1, nil
}
