package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TriggerWindow is how long after a Trigger of a schedule a second Trigger
// of it enqueues nothing and returns the first one's job: a double click,
// or the same "run now" sent by two instances, makes one job.
const TriggerWindow = 5 * time.Second

// FireOf returns the fire that job, a job a schedule enqueued, runs for:
// the schedule's name and the fire time, read from the unique key that the
// fire enqueued it with (cron:<name>:<Unix time>, see UniqueKey, or
// TriggerKey's for a Trigger), never from its ScheduledAt, which a retry, a
// snooze or a rescue moves. Every attempt of the job sees the same Fire. ok
// is false for a job whose unique key is not a fire's. A handler calls it
// with its job:
//
//	fire, ok := scheduler.FireOf(job.Job) // job is a *worker.Job[T]
func FireOf(job *queue.Job) (fire Fire, ok bool) {
	if job == nil {
		return Fire{}, false
	}
	rest, ok := strings.CutPrefix(job.UniqueKey, "cron:")
	if !ok {
		return Fire{}, false
	}
	rest, triggered := strings.CutSuffix(rest, triggerSuffix)
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 {
		return Fire{}, false
	}
	sec, err := strconv.ParseInt(rest[i+1:], 10, 64)
	if err != nil {
		return Fire{}, false
	}
	return Fire{Schedule: rest[:i], At: time.Unix(sec, 0).UTC(), JobID: job.ID, Triggered: triggered}, true
}

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
// Jobs already enqueued are left alone; Trigger still runs it now. It
// reports whether the schedule was running, and returns an error wrapping
// ErrNotFound when there is no such schedule.
func Pause(ctx context.Context, pool *pgxpool.Pool, name, by string) (changed bool, err error) {
	return setPaused(ctx, pool, name, pauseSQL, by)
}

// Resume resumes the paused schedule name: its fires from now on are
// enqueued (those of the pause are not caught up), by every instance
// within its SyncInterval. It reports whether the schedule was paused,
// and returns an error wrapping ErrNotFound when there is no such schedule.
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
// running Scheduler picks it up at once.
func (s *Scheduler) Pause(ctx context.Context, name, by string) (bool, error) {
	changed, err := Pause(ctx, s.client.Pool(), name, by)
	s.nudge()
	return changed, err
}

// Resume is the package's Resume through this Scheduler's database; a
// running Scheduler picks it up at once.
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

// Delete removes the schedule name from the schedules table; it reports
// whether there was one. Every instance stops firing it within its
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
// running Scheduler picks it up at once.
func (s *Scheduler) Delete(ctx context.Context, name string) (bool, error) {
	found, err := Delete(ctx, s.client.Pool(), name)
	s.nudge()
	return found, err
}

// triggerSQL locks the schedule's row and reads its definition, the fire
// time of a trigger now (the database's clock, to the second), and the
// previous trigger's fire time if it is within TriggerWindow ($2).
const triggerSQL = `
SELECT kind, args, queue, coalesce(priority, 0), coalesce(max_attempts, 0), date_trunc('second', now()),
       CASE WHEN triggered_at > now() - $2::bigint * interval '1 microsecond' THEN triggered_at END
FROM jobfence_schedules WHERE name = $1 FOR NO KEY UPDATE`

const triggeredSQL = `UPDATE jobfence_schedules SET triggered_at = $2 WHERE name = $1`

// Trigger enqueues one fire of the schedule name now ("run now"), through
// client, whatever its spec, also while it is paused, and returns it: a
// job of the schedule's kind, args and options, at the database's clock to
// the second, keyed TriggerKey (cron:<name>:<Unix time>-run), so that it is
// a job of its own beside a fire of the spec in the same second, and
// SkipIfRunning counts it as a run of the schedule. A second Trigger
// within TriggerWindow enqueues nothing and returns the first one's job,
// with Inserted false: a double click, or the same request sent by two
// instances at once, makes one job (the schedule's row, locked, orders
// them). A handler knows a triggered run by FireOf's Fire.Triggered. It
// returns an error wrapping ErrNotFound when there is no such schedule.
func Trigger(ctx context.Context, client *pgqueue.Client, name string) (Fire, error) {
	return trigger(ctx, client, name, DefaultEnqueueTimeout)
}

// Trigger is the package's Trigger through this Scheduler's client, its
// transaction bounded by Config.EnqueueTimeout. Config.OnFire is not
// called for it.
func (s *Scheduler) Trigger(ctx context.Context, name string) (Fire, error) {
	return trigger(ctx, s.client, name, s.cfg.EnqueueTimeout)
}

func trigger(ctx context.Context, client *pgqueue.Client, name string, timeout time.Duration) (Fire, error) {
	fail := func(err error) (Fire, error) { return Fire{}, fmt.Errorf("scheduler: trigger %q: %w", name, err) }
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tx, err := client.Pool().BeginTx(ctx, pgx.TxOptions{BeginQuery: fireBounds(timeout)})
	if err != nil {
		return fail(err)
	}
	defer tx.Rollback(ctx)
	var p queue.EnqueueParams
	var args []byte
	var at time.Time
	var previous *time.Time
	err = tx.QueryRow(ctx, triggerSQL, name, TriggerWindow.Microseconds()).Scan(
		&p.Kind, &args, &p.Queue, &p.Priority, &p.MaxAttempts, &at, &previous)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fail(ErrNotFound)
	case err != nil:
		return fail(err)
	case previous != nil:
		f := Fire{Schedule: name, At: previous.UTC(), Triggered: true}
		if err := tx.QueryRow(ctx, `SELECT id FROM jobfence_jobs WHERE unique_key = $1`, TriggerKey(name, f.At)).Scan(&f.JobID); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fail(err)
		}
		return f, nil
	case args == nil:
		return fail(fmt.Errorf("%w: it was registered by a jobfence release that did not store its arguments; start an instance of this release that defines it, or Put it", ErrInvalidOptions))
	}
	at = at.UTC()
	p.Args, p.ScheduledAt, p.UniqueKey = json.RawMessage(args), at, TriggerKey(name, at)
	p = p.WithDefaults()
	res, err := client.EnqueueTx(ctx, tx, p)
	if err != nil {
		return fail(err)
	}
	if _, err := tx.Exec(ctx, triggeredSQL, name, at); err != nil {
		return fail(err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fail(err)
	}
	return Fire{Schedule: name, At: at, JobID: res.ID, Inserted: res.Inserted, Triggered: true}, nil
}

// nudge asks the running loop, if any, to read the schedules table now.
func (s *Scheduler) nudge() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// versionsSQL lists the schedules this instance fires, with their
// versions: those added at run time and those it defines in code ($1).
const versionsSQL = `SELECT name, version FROM jobfence_schedules WHERE origin = 'runtime' OR name = ANY($1)`

// rowsSQL reads the definitions of the schedules $1.
const rowsSQL = `
SELECT name, spec, time_zone, kind, queue, catch_up, skip_if_running, args, coalesce(priority, 0), coalesce(max_attempts, 0),
       coalesce((extract(epoch FROM catch_up_window) * 1000000)::bigint, 0), version, paused_at IS NOT NULL,
       last_fire, fires_from
FROM jobfence_schedules WHERE name = ANY($1)`

// scheduleRow is a row of rowsSQL.
type scheduleRow struct {
	name, spec, timeZone, kind, queue, catchUp string
	skip                                       bool
	args                                       []byte
	priority, maxAttempts                      int
	windowUs, version                          int64
	paused                                     bool
	lastFire, firesFrom                        *time.Time
}

// sync reads the schedules table and brings s.schedules in line with it:
// schedules added (origin runtime), changed, paused, resumed or deleted
// since the last read. Only rows whose version moved are read whole.
// atStart is true in Start, whose errors are returned; in the loop, a
// failure is logged (once while it lasts) and the next sync tries again.
func (s *Scheduler) sync(ctx context.Context, now time.Time, atStart bool) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.EnqueueTimeout)
	defer cancel()
	err := s.syncOnce(ctx, now, atStart)
	switch {
	case err != nil && atStart:
		return fmt.Errorf("read the schedules: %w", err)
	case err != nil:
		if !s.syncFailing && ctx.Err() == nil {
			s.logger.Warn("scheduler: reading the schedules table failed; retrying every SyncInterval", "error", err)
		}
		s.syncFailing = true
	case s.syncFailing:
		s.logger.Info("scheduler: reading the schedules table works again")
		s.syncFailing = false
	}
	return err
}

func (s *Scheduler) syncOnce(ctx context.Context, now time.Time, atStart bool) error {
	pool := s.client.Pool()
	var defined []string
	for _, sc := range s.defined {
		defined = append(defined, sc.name)
	}
	rows, err := pool.Query(ctx, versionsSQL, defined)
	if err != nil {
		return err
	}
	versions := map[string]int64{}
	var names []string
	var name string
	var version int64
	_, err = pgx.ForEachRow(rows, []any{&name, &version}, func() error {
		versions[name] = version
		names = append(names, name)
		return nil
	})
	if err != nil {
		return err
	}
	current := map[string]*schedule{}
	for _, sc := range s.schedules {
		current[sc.name] = sc
	}
	var reload []string
	for n, v := range versions {
		if cur := current[n]; cur != nil && cur.version == v {
			continue
		}
		if bv, ok := s.broken[n]; ok && bv == v {
			continue
		}
		reload = append(reload, n)
	}
	loaded := map[string]*schedule{}
	if len(reload) > 0 {
		rows, err := pool.Query(ctx, rowsSQL, reload)
		if err != nil {
			return err
		}
		read, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (scheduleRow, error) {
			var r scheduleRow
			err := row.Scan(&r.name, &r.spec, &r.timeZone, &r.kind, &r.queue, &r.catchUp, &r.skip, &r.args,
				&r.priority, &r.maxAttempts, &r.windowUs, &r.version, &r.paused, &r.lastFire, &r.firesFrom)
			return r, err
		})
		if err != nil {
			return err
		}
		for _, r := range read {
			sc, err := s.fromRow(r, now)
			if err != nil {
				s.broken[r.name] = r.version
				s.logger.Error("scheduler: a schedule in the table cannot be read by this instance; it does not fire it",
					"schedule", r.name, "version", r.version, "error", err)
				continue
			}
			delete(s.broken, r.name)
			loaded[r.name] = sc
		}
	}

	// The schedules defined in code first, in the order they were added,
	// then the others by name.
	order := map[string]int{}
	for i, n := range defined {
		order[n] = i - len(defined)
	}
	slices.SortFunc(names, func(a, b string) int {
		if oa, ob := order[a], order[b]; oa != ob {
			return oa - ob
		}
		return strings.Compare(a, b)
	})
	next := make([]*schedule, 0, len(names))
	for _, n := range names {
		cur, sc := current[n], loaded[n]
		switch {
		case sc == nil && cur != nil && cur.version == versions[n]:
			next = append(next, cur)
			continue
		case sc == nil:
			// Unreadable, or deleted since versionsSQL.
			continue
		case cur == nil:
			sc.cursor, sc.fresh = anchor(sc, now), true
			if !atStart {
				s.logger.Info("scheduler: schedule picked up from the table", "schedule", n, "spec", sc.specStr,
					"time_zone", sc.spec.Location().String(), "kind", sc.params.Kind, "paused", sc.paused)
			}
		default:
			sc.cursor, sc.fresh = cur.cursor, cur.fresh
			if sc.firesFrom != nil {
				sc.cursor = later(sc.cursor, *sc.firesFrom)
			}
			switch {
			case sc.paused && !cur.paused:
				s.logger.Info("scheduler: schedule paused", "schedule", n)
			case !sc.paused && cur.paused:
				s.logger.Info("scheduler: schedule resumed", "schedule", n)
			default:
				s.logger.Info("scheduler: schedule changed in the table", "schedule", n, "spec", sc.specStr,
					"time_zone", sc.spec.Location().String(), "kind", sc.params.Kind, "paused", sc.paused)
			}
		}
		next = append(next, sc)
	}
	for n := range current {
		if _, ok := versions[n]; !ok {
			s.logger.Info("scheduler: schedule deleted from the table; no longer fired", "schedule", n)
		}
	}
	s.schedules = next
	return nil
}

// fromRow returns the schedule a row of rowsSQL defines.
func (s *Scheduler) fromRow(r scheduleRow, now time.Time) (*schedule, error) {
	policy, err := ParseCatchUpPolicy(r.catchUp)
	if err != nil {
		return nil, err
	}
	window := time.Duration(r.windowUs) * time.Microsecond
	if window >= s.cfg.Retention {
		s.logger.Warn("scheduler: a schedule's catch-up window is not shorter than this instance's job retention; using half the retention",
			"schedule", r.name, "catch_up_window", window, "retention", s.cfg.Retention)
		window = 0
	}
	opts := Options{
		Queue: r.queue, Priority: r.priority, MaxAttempts: r.maxAttempts, TimeZone: r.timeZone,
		CatchUp: policy, CatchUpWindow: window, SkipIfRunning: r.skip,
	}
	sc, err := buildSchedule(r.name, r.spec, r.kind, r.args, opts, s.cfg.Retention, s.cfg.Grace, now, false)
	if err != nil {
		return nil, err
	}
	sc.version, sc.paused = r.version, r.paused
	sc.lastFire, sc.firesFrom = r.lastFire, r.firesFrom
	return sc, nil
}

// anchor is where a schedule just read starts: after its last enqueued
// fire, but not before its fires_from; now if it has neither. A last fire
// ahead of this host's clock is not taken (the host's clock lags): the
// fires up to it are found enqueued.
func anchor(sc *schedule, now time.Time) time.Time {
	var c time.Time
	if sc.lastFire != nil && sc.lastFire.Before(now) {
		c = *sc.lastFire
	}
	if sc.firesFrom != nil {
		c = later(c, *sc.firesFrom)
	}
	if c.IsZero() {
		c = now
	}
	return c
}
