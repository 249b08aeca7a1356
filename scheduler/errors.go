package scheduler

import (
	"errors"
	"fmt"
)

// Errors that Add, Start and the run-time changes (Put, Pause, ...) return, wrapped in a *ScheduleError when they
// concern one schedule; test for them with errors.Is.
var (
	// ErrInvalidSpec reports a cron spec that does not parse or never fires.
	ErrInvalidSpec = errors.New("invalid cron spec")
	// ErrUnknownTimeZone reports a time zone that is not in the zone
	// database, or "Local".
	ErrUnknownTimeZone = errors.New("unknown time zone")
	// ErrDuplicateName reports a schedule name added twice to one Scheduler.
	ErrDuplicateName = errors.New("schedule name already added")
	// ErrInvalidOptions reports Options or arguments that cannot be used.
	ErrInvalidOptions = errors.New("invalid options")
	// ErrStarted reports Add or Start on a Scheduler already started.
	ErrStarted = errors.New("scheduler: already started")
	// ErrNotStarted reports Stop on a Scheduler that is not running.
	ErrNotStarted = errors.New("scheduler: not started")
	// ErrStopping reports Add, Start or Stop on a Scheduler whose Stop has
	// not returned yet: its loop may still be enqueuing a fire.
	ErrStopping = errors.New("scheduler: stopping")
	// ErrNotFound reports a schedule name that the schedules table does
	// not have (Get, Pause, Resume, Trigger).
	ErrNotFound = errors.New("no such schedule")
)

// ScheduleError is an error about one schedule: it names the schedule and
// its spec. Err wraps one of the package's sentinel errors.
type ScheduleError struct {
	Name string
	Spec string
	Err  error
}

func (e *ScheduleError) Error() string {
	return fmt.Sprintf("scheduler: schedule %q spec %q: %v", e.Name, e.Spec, e.Err)
}

// Unwrap returns e.Err.
func (e *ScheduleError) Unwrap() error { return e.Err }
