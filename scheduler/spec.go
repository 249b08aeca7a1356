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
		s.Location = loc
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
// the spec never fires again (robfig/cron looks five years ahead).
func (s *Spec) Next(t time.Time) time.Time {
	n := s.sched.Next(t.In(s.loc))
	if n.IsZero() {
		return n
	}
	return n.UTC()
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
