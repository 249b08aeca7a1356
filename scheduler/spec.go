package scheduler

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// parser accepts 5 fields, an optional leading seconds field, and
// descriptors (@hourly, @daily, @every 90s, ...).
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Spec is a parsed cron spec bound to a time zone. Its fire times depend only
// on the spec and the zone, never on the instant a host asks from, so hosts
// whose clocks disagree compute the same fires.
type Spec struct {
	sched cron.Schedule
	loc   *time.Location
}

// ParseSpec parses spec in robfig/cron's syntax: five fields (minute hour
// day-of-month month day-of-week), an optional leading seconds field,
// descriptors such as @hourly, @daily and @every 90s, and an optional
// CRON_TZ=Zone or TZ=Zone prefix. Without a prefix the spec runs in
// timeZone, or in UTC when timeZone is empty; naming a different zone in both
// is an error. "Local" is refused: it means a different zone on each host.
//
// An @every d schedule fires at the multiples of d since the Unix epoch
// (d is rounded down to whole seconds, and is at least one second), so every
// host agrees on its fires whenever it started.
func ParseSpec(spec, timeZone string) (*Spec, error) {
	rest := strings.TrimSpace(spec)
	var zone string
	for _, prefix := range []string{"CRON_TZ=", "TZ="} {
		if strings.HasPrefix(rest, prefix) {
			zone, rest, _ = strings.Cut(rest[len(prefix):], " ")
			rest = strings.TrimSpace(rest)
			if zone == "" {
				return nil, fmt.Errorf("%w: empty time zone after %s", ErrInvalidSpec, prefix)
			}
			if rest == "" {
				return nil, fmt.Errorf("%w: no schedule after %s%s", ErrInvalidSpec, prefix, zone)
			}
			break
		}
	}
	switch {
	case zone == "" && timeZone == "":
		zone = "UTC"
	case zone == "":
		zone = timeZone
	case timeZone != "" && timeZone != zone:
		return nil, fmt.Errorf("%w: the spec names time zone %s but Options.TimeZone is %s", ErrInvalidSpec, zone, timeZone)
	}
	loc, err := loadLocation(zone)
	if err != nil {
		return nil, err
	}
	sched, err := parser.Parse(rest)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSpec, err)
	}
	switch s := sched.(type) {
	case *cron.SpecSchedule:
		// robfig/cron matches the fields on the zone's clock as it runs,
		// which drops a daily fire in spring and doubles it in autumn;
		// wall matches them on the calendar and maps each match to an
		// instant itself.
		s.Location = time.UTC
		sched = wall{civil: s, loc: loc, everyHour: s.Hour&allHours == allHours}
	case cron.ConstantDelaySchedule:
		sched = every{s.Delay}
	default:
		return nil, fmt.Errorf("%w: unsupported schedule type %T", ErrInvalidSpec, sched)
	}
	return &Spec{sched: sched, loc: loc}, nil
}

func loadLocation(zone string) (*time.Location, error) {
	if zone == "Local" {
		return nil, fmt.Errorf("%w: Local is a different zone on each host; name an IANA zone such as Europe/Paris", ErrUnknownTimeZone)
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return nil, fmt.Errorf("%w %q", ErrUnknownTimeZone, zone)
	}
	return loc, nil
}

// Location returns the time zone the spec's fields are read in.
func (s *Spec) Location() *time.Location { return s.loc }

// Next returns the first fire strictly after t, in UTC, or the zero time if
// the spec never fires again (it looks five years ahead). Fires around a
// daylight-saving transition are those the package documentation
// describes: a schedule that names its hours fires once per matching wall
// time, one that runs every hour follows the clock.
func (s *Spec) Next(t time.Time) time.Time {
	n := s.sched.Next(t.In(s.loc))
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

// allHours is the hour field of a spec that runs every hour.
const allHours = 1<<24 - 1

// lookback is a span after which a zone's clock reads more, whatever was
// done to it meanwhile: no zone's offset from UTC has reached 16 hours, so
// an instant reads at least 16 hours less than any instant lookback later.
const lookback = 48 * time.Hour

// wall is a cron spec read on a zone's wall clock. Its fields are matched
// against civil times (dates and times of day, no zone), which civil holds
// as times in UTC, a calendar without transitions; each match is then
// mapped to an instant:
//
//   - everyHour false (the spec names its hours, as in "30 2 * * *"): a
//     match fires at the first instant whose reading is that civil time or
//     later. A time skipped in spring fires when the clock jumps past it,
//     once however many matches the gap holds; a time repeated in autumn
//     fires at its first occurrence only. Each wall-clock fire happens
//     once, as with cron(8) for jobs at a fixed time.
//   - everyHour true ("30 * * * *", "*/5 * * * *", @hourly): the spec
//     fires at each instant whose reading matches, as the clock runs. The
//     hour skipped in spring never reads, so it has no fires; the repeated
//     hour reads twice, so it fires twice: both are an hour of real time,
//     and the fires stay evenly spaced. cron(8) treats such jobs so too.
//
// Both depend on the instant asked from only through the fires before it,
// so every host finds the same fire times.
type wall struct {
	civil     *cron.SpecSchedule // Location: time.UTC
	loc       *time.Location
	everyHour bool
}

// Next returns the first fire after t.
func (w wall) Next(t time.Time) time.Time {
	if w.everyHour {
		return w.nextOnClock(t)
	}
	// The fires after t are the matches after every reading so far: a
	// match the clock has shown (or jumped past) fired already, even if
	// the clock was turned back below it since.
	c := w.civil.Next(highWater(t, w.loc))
	if c.IsZero() {
		return c
	}
	return firstReading(c, w.loc)
}

// nextOnClock returns the first instant after t whose reading matches,
// walking the zone's periods of constant offset from t's on.
func (w wall) nextOnClock(t time.Time) time.Time {
	p := t.In(w.loc)
	after := civil(p)
	for {
		_, end := p.ZoneBounds()
		c := w.civil.Next(after)
		if c.IsZero() {
			return c
		}
		if x := c.Add(-offset(p)); end.IsZero() || x.Before(end) {
			return x
		}
		// c does not read in p's period: go on from the next one's first
		// reading, inclusive.
		p = end
		after = civil(p).Add(-time.Nanosecond)
	}
}

// civil returns t's reading on its location's clock, as a time in UTC.
func civil(t time.Time) time.Time {
	return t.UTC().Add(offset(t))
}

// offset returns t's location's offset from UTC at t.
func offset(t time.Time) time.Duration {
	_, off := t.Zone()
	return time.Duration(off) * time.Second
}

// highWater returns the latest reading loc's clock has shown at or before
// t. It is t's own reading except after the clock was turned back, until
// the clock catches up again.
func highWater(t time.Time, loc *time.Location) time.Time {
	t = t.In(loc)
	w := civil(t)
	for p := t; ; {
		start, _ := p.ZoneBounds()
		// Instants lookback before t read less than t does.
		if start.IsZero() || t.Sub(start) > lookback {
			return w
		}
		p = start.Add(-time.Nanosecond)
		if c := civil(p); c.After(w) {
			w = c
		}
	}
}

// firstReading returns the first instant at which loc's clock reads c (a
// civil time, as a time in UTC) or later: the instant that reads c, the
// first of two if the clock was turned back over c, or the instant the
// clock jumped past c if it never reads c.
func firstReading(c time.Time, loc *time.Location) time.Time {
	// The walk starts from an instant that reads less than c.
	p := c.Add(-lookback).In(loc)
	for {
		if !civil(p).Before(c) {
			// p starts a period and reads more than c already: the clock
			// jumped past c at p.
			return p.UTC()
		}
		_, end := p.ZoneBounds()
		if x := c.Add(-offset(p)); end.IsZero() || x.Before(end) {
			return x
		}
		p = end
	}
}

// every fires at the multiples of d since the Unix epoch.
type every struct{ d time.Duration }

func (e every) Next(t time.Time) time.Time {
	secs := int64(e.d / time.Second)
	u := t.Unix() // whole seconds, rounded down
	n := u - mod(u, secs) + secs
	return time.Unix(n, 0).In(t.Location())
}

func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// firesIn calls f with each fire t of s with after < t <= until, in order,
// until f returns false.
func (s *Spec) firesIn(after, until time.Time, f func(time.Time) bool) {
	for t := s.Next(after); !t.IsZero() && !t.After(until); t = s.Next(t) {
		if !f(t) {
			return
		}
	}
}
