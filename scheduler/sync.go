package scheduler

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

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
