package scheduler

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/queue"
)

// putSQL adds a schedule of origin runtime, or replaces the definition of
// the schedule of that name, keeping its origin and its paused state. A
// changed definition takes a new version and fires from now on: fires_from
// moves, so that no instance catches up fires of the new spec from before
// the change. It returns whether the row was inserted and whether it
// changed.
const putSQL = `
INSERT INTO jobfence_schedules AS s (name, spec, time_zone, kind, queue, catch_up, skip_if_running, next_fire,
    args, priority, max_attempts, catch_up_window, origin, version, fires_from)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10, $11, $12::bigint * interval '1 microsecond', 'runtime',
        nextval('jobfence_schedules_version'), now())
ON CONFLICT (name) DO UPDATE SET
    spec = EXCLUDED.spec, time_zone = EXCLUDED.time_zone, kind = EXCLUDED.kind, queue = EXCLUDED.queue,
    catch_up = EXCLUDED.catch_up, skip_if_running = EXCLUDED.skip_if_running, args = EXCLUDED.args,
    priority = EXCLUDED.priority, max_attempts = EXCLUDED.max_attempts, catch_up_window = EXCLUDED.catch_up_window,
    next_fire = CASE WHEN ` + definitionChanged + ` THEN EXCLUDED.next_fire ELSE s.next_fire END,
    version = CASE WHEN ` + definitionChanged + ` THEN EXCLUDED.version ELSE s.version END,
    fires_from = CASE WHEN ` + definitionChanged + ` THEN now() ELSE s.fires_from END,
    updated_at = CASE WHEN ` + definitionChanged + ` THEN now() ELSE s.updated_at END
RETURNING xmax = 0, updated_at = now()`

// Put adds the schedule name to the schedules table, or replaces its
// definition, for the whole fleet at once: every running Scheduler on the
// database picks it up within its Config.SyncInterval (2 s by default) and
// enqueues its fires from then on, one job per fire, with no restart. The
// arguments are Add's. A schedule added this way persists in the table
// until Delete, and every instance fires it, also instances started later.
//
// Put on a schedule defined in code (Add) replaces its definition until an
// instance that defines it starts again: the code's definition wins at
// Start. A paused schedule stays paused. A changed definition fires from
// the change on: no fire of the new spec before it is caught up.
//
// created reports whether the name was new. The options are checked as Add
// checks them, the catch-up window against DefaultRetention; a
// *ScheduleError says what is wrong.
func Put(ctx context.Context, pool *pgxpool.Pool, name, spec, kind string, args any, opts Options) (created bool, err error) {
	sc, err := checkSchedule(name, spec, kind, args, opts, DefaultRetention, DefaultGrace, time.Now())
	if err != nil {
		return false, err
	}
	created, _, err = put(ctx, pool, sc)
	return created, err
}

// Put is the package's Put through this Scheduler's database, with the
// catch-up window checked against Config.Retention. A running Scheduler
// picks the change up at once; the others within their SyncInterval. It
// may be called before Start, after Start and after Stop.
func (s *Scheduler) Put(ctx context.Context, name, spec, kind string, args any, opts Options) (created bool, err error) {
	sc, err := s.newSchedule(name, spec, kind, args, opts)
	if err != nil {
		return false, err
	}
	created, _, err = put(ctx, s.client.Pool(), sc)
	s.nudge()
	return created, err
}

// PutArgs is Put for typed arguments: the jobs are of kind args.Kind().
func (s *Scheduler) PutArgs(ctx context.Context, name, spec string, args queue.Args, opts Options) (created bool, err error) {
	return s.Put(ctx, name, spec, args.Kind(), args, opts)
}

func put(ctx context.Context, pool *pgxpool.Pool, sc *schedule) (created, changed bool, err error) {
	def := sc.definition()
	err = pool.QueryRow(ctx, putSQL, sc.name, def.spec, def.timeZone, def.kind, def.queue, def.catchUp, def.skipIfRunning,
		nullTime(sc.spec.Next(time.Now())), def.args, def.priority, def.maxAttempts, windowParam(def.window)).Scan(&created, &changed)
	if err != nil {
		return false, false, fmt.Errorf("scheduler: put %q: %w", sc.name, err)
	}
	return created, changed, nil
}

// pauseSQL pauses a schedule that is not paused.
const pauseSQL = `
UPDATE jobfence_schedules SET paused_at = now(), paused_by = $2, updated_at = now(),
    version = nextval('jobfence_schedules_version')
WHERE name = $1 AND paused_at IS NULL`

// resumeSQL resumes a paused schedule: it fires from now on, so that the
// fires of the pause are not caught up.
const resumeSQL = `
UPDATE jobfence_schedules SET paused_at = NULL, paused_by = NULL, fires_from = now(), updated_at = now(),
    next_fire = coalesce($2, next_fire), version = nextval('jobfence_schedules_version')
WHERE name = $1 AND paused_at IS NOT NULL`

const existsSQL = `SELECT EXISTS (SELECT FROM jobfence_schedules WHERE name = $1)`

// Pause pauses the schedule name for the whole fleet, by (free text: a user,
// a host), until Resume: no instance enqueues a fire of it once Pause
// returns. This is decided in the fire's own transaction, which reads the
// schedule's row under a lock (so an instance that has not yet seen the
// pause still enqueues nothing), and it lasts across restarts and deploys.
// Jobs already enqueued are left alone; Trigger still runs it now.
//
// changed is true when this call paused the schedule: it was running.
// It is false, with a nil error, when the schedule was paused already:
// nothing changes then, and the first pause stays on record (its time and
// its by, not this call's). Of concurrent Pauses of a running schedule,
// exactly one reports true. With no such schedule, changed is false and
// the error wraps ErrNotFound.
func Pause(ctx context.Context, pool *pgxpool.Pool, name, by string) (changed bool, err error) {
	return setPaused(ctx, pool, name, pauseSQL, by)
}

// Resume resumes the paused schedule name: its fires from now on are
// enqueued (those of the pause are not caught up), by every instance
// within its SyncInterval.
//
// changed is true when this call resumed the schedule: it was paused. It
// is false, with a nil error, when the schedule was not paused: nothing
// changes then (its next fire is not recomputed, its fires are not
// restarted from now). Of concurrent Resumes of a paused schedule,
// exactly one reports true. With no such schedule, changed is false and
// the error wraps ErrNotFound.
func Resume(ctx context.Context, pool *pgxpool.Pool, name string) (changed bool, err error) {
	var next *time.Time
	if i, err := Get(ctx, pool, name); err != nil {
		return false, err
	} else if sp, err := ParseSpec(i.Spec, i.TimeZone); err == nil {
		next = nullTime(sp.Next(time.Now()))
	}
	return setPaused(ctx, pool, name, resumeSQL, next)
}

// Pause is the package's Pause through this Scheduler's database; a
// running Scheduler picks it up at once. The bool is the package's
// changed: true when this call paused a running schedule, false when it
// was paused already (the first pause stays on record) or there is no
// such schedule (the error wraps ErrNotFound).
func (s *Scheduler) Pause(ctx context.Context, name, by string) (bool, error) {
	changed, err := Pause(ctx, s.client.Pool(), name, by)
	s.nudge()
	return changed, err
}

// Resume is the package's Resume through this Scheduler's database; a
// running Scheduler picks it up at once. The bool is the package's
// changed: true when this call resumed a paused schedule, false when it
// was not paused (nothing changes) or there is no such schedule (the
// error wraps ErrNotFound).
func (s *Scheduler) Resume(ctx context.Context, name string) (bool, error) {
	changed, err := Resume(ctx, s.client.Pool(), name)
	s.nudge()
	return changed, err
}

func setPaused(ctx context.Context, pool *pgxpool.Pool, name, sql string, arg any) (bool, error) {
	what := "pause"
	if sql == resumeSQL {
		what = "resume"
	}
	tag, err := pool.Exec(ctx, sql, name, arg)
	if err != nil {
		return false, fmt.Errorf("scheduler: %s %q: %w", what, name, err)
	}
	if tag.RowsAffected() == 1 {
		return true, nil
	}
	var exists bool
	if err := pool.QueryRow(ctx, existsSQL, name).Scan(&exists); err != nil {
		return false, fmt.Errorf("scheduler: %s %q: %w", what, name, err)
	}
	if !exists {
		return false, fmt.Errorf("scheduler: %s %q: %w", what, name, ErrNotFound)
	}
	return false, nil
}

const deleteSQL = `DELETE FROM jobfence_schedules WHERE name = $1`

// Delete removes the schedule name from the schedules table. It reports
// true when this call removed its row, and false, with a nil error, when
// there was no such schedule: unlike Pause and Resume, a missing
// schedule is not an error (ErrNotFound), since it is what Delete makes.
// Of concurrent Deletes, exactly one reports true. A schedule defined in
// code that no instance has written to the table yet (none started since
// it was added) has no row: false. Every instance stops firing it within its
// SyncInterval, and none enqueues a fire of it once Delete returns (the
// fire's transaction finds no row). The jobs of its fires are left alone.
// A schedule defined in code comes back when an instance that defines it
// starts: remove it from the code, or Pause it, to stop it for good.
func Delete(ctx context.Context, pool *pgxpool.Pool, name string) (bool, error) {
	tag, err := pool.Exec(ctx, deleteSQL, name)
	if err != nil {
		return false, fmt.Errorf("scheduler: delete %q: %w", name, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Delete is the package's Delete through this Scheduler's database; a
// running Scheduler picks it up at once. The bool is the package's: true
// when this call removed the schedule's row, false, with a nil error,
// when there was none.
func (s *Scheduler) Delete(ctx context.Context, name string) (bool, error) {
	found, err := Delete(ctx, s.client.Pool(), name)
	s.nudge()
	return found, err
}

// nudge asks the running loop, if any, to read the schedules table now.
func (s *Scheduler) nudge() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}
