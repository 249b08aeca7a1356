package jobfence

import (
	"context"
	"errors"
	"fmt"

	"github.com/jobfence/jobfence/scheduler"
)

// The types of the schedule methods; each is the scheduler type, not a
// copy.
type (
	// ScheduleOptions are the optional settings of one schedule: its
	// jobs' queue, priority and attempts, the spec's time zone, the
	// catch-up policy after downtime, SkipIfRunning. The zero value takes
	// every default. See scheduler.Options.
	ScheduleOptions = scheduler.Options

	// ScheduleInfo is a schedule as the schedules table records it:
	// definition, whether it is paused and by whom, its next and last
	// fire. See scheduler.Info.
	ScheduleInfo = scheduler.Info

	// ScheduleFire is one fire of a schedule and its job; Schedules().Trigger
	// returns one. See scheduler.Fire.
	ScheduleFire = scheduler.Fire

	// CatchUpPolicy says what becomes of the fires missed while no
	// instance ran (ScheduleOptions.CatchUp). See scheduler.CatchUpPolicy.
	CatchUpPolicy = scheduler.CatchUpPolicy

	// ScheduleError is what is wrong with a schedule's definition: it
	// names the schedule and its spec, and wraps one of the scheduler
	// package's sentinels (scheduler.ErrInvalidSpec, ...).
	ScheduleError = scheduler.ScheduleError
)

// The catch-up policies (ScheduleOptions.CatchUp).
const (
	// CatchUpSkip drops missed fires (the default).
	CatchUpSkip = scheduler.CatchUpSkip
	// CatchUpLatest enqueues the latest missed fire inside the catch-up
	// window, once.
	CatchUpLatest = scheduler.CatchUpLatest
	// CatchUpAll enqueues every missed fire inside the catch-up window,
	// oldest first.
	CatchUpAll = scheduler.CatchUpAll
)

// ErrScheduleNotFound reports a schedule name that the schedules table
// does not have (Schedules().Get, Pause, Resume, Delete, Trigger).
var ErrScheduleNotFound = scheduler.ErrNotFound

// errNoScheduleName reports an empty schedule name.
var errNoScheduleName = errors.New("a schedule name is required")

// Schedules returns the handle on the fleet's cron schedules, as the
// schedules table holds them: add, pause, resume, delete, run now, list.
// Every client has it, insert-only included, so that an API process
// pauses or triggers a schedule that its workers' clients fire: a change
// reaches every running instance within its scheduler's SyncInterval (2s
// by default), and this client's own scheduler, if it runs one, at once.
func (c *Client) Schedules() Schedules { return Schedules{s: c.admin, c: c} }

// Schedules changes and reads the fleet's schedules through a Client
// (Client.Schedules), with the scheduler package's run-time functions and
// the client's Config.Scheduler (its Retention checks catch-up windows,
// its EnqueueTimeout bounds a Trigger).
type Schedules struct {
	// s is the client's scheduler, or an unstarted one of its
	// Config.Scheduler for a client that runs none: its methods work
	// without Start, and nudge a running loop.
	s *scheduler.Scheduler
	c *Client
}

// Put adds the schedule name to the schedules table, or replaces its
// definition, for the whole fleet: every running instance enqueues its
// fires from then on, one job of args (and args.Kind()) per fire, with no
// restart, until Delete. It reports whether the name was new. A paused
// schedule stays paused; a changed definition fires from the change on
// (no fire of the new spec before it is caught up). A schedule defined in
// a Config.Schedules keeps the definition Put gives it until an instance
// that defines it starts again. A definition that cannot be used is an
// error wrapping a *ScheduleError that says what is wrong.
func (s Schedules) Put(ctx context.Context, name, spec string, args Args, opts ScheduleOptions) (created bool, err error) {
	if name == "" {
		return false, fmt.Errorf("jobfence: put schedule: %w", errNoScheduleName)
	}
	if args == nil {
		return false, fmt.Errorf("jobfence: put schedule %q: nil args", name)
	}
	return s.s.PutArgs(ctx, name, spec, args, opts)
}

// Pause pauses the schedule name for the whole fleet; by says who paused
// it (free text: a user, a host). No instance enqueues a fire of it once
// Pause returns, across restarts and deploys, until Resume; jobs already
// enqueued are left alone, and Trigger still runs it now. paused is true
// when this call paused it, false when it was paused already. An unknown
// name is an error wrapping ErrScheduleNotFound.
func (s Schedules) Pause(ctx context.Context, name, by string) (paused bool, err error) {
	if name == "" {
		return false, fmt.Errorf("jobfence: pause schedule: %w", errNoScheduleName)
	}
	return s.s.Pause(ctx, name, by)
}

// Resume resumes the paused schedule name: its fires from now on are
// enqueued (those of the pause are not caught up). resumed is true when
// this call resumed it, false when it was not paused. An unknown name is
// an error wrapping ErrScheduleNotFound.
func (s Schedules) Resume(ctx context.Context, name string) (resumed bool, err error) {
	if name == "" {
		return false, fmt.Errorf("jobfence: resume schedule: %w", errNoScheduleName)
	}
	return s.s.Resume(ctx, name)
}

// Delete removes the schedule name from the schedules table: no instance
// enqueues a fire of it once Delete returns, and the jobs of its fires are
// left alone. A schedule of a Config.Schedules comes back when an instance
// that defines it starts: remove it from the code, or Pause it, to stop it
// for good. An unknown name is an error wrapping ErrScheduleNotFound.
func (s Schedules) Delete(ctx context.Context, name string) error {
	if name == "" {
		return fmt.Errorf("jobfence: delete schedule: %w", errNoScheduleName)
	}
	found, err := s.s.Delete(ctx, name)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("jobfence: delete schedule %q: %w", name, ErrScheduleNotFound)
	}
	return nil
}

// Trigger enqueues one fire of the schedule name now ("run now"), paused
// or not, and returns it: a job of the schedule's kind, args and options,
// beside the fires of its spec. A second Trigger within
// scheduler.TriggerWindow (5s) enqueues nothing and returns the first
// one's job with Inserted false, so a double click makes one job. An
// unknown name is an error wrapping ErrScheduleNotFound.
func (s Schedules) Trigger(ctx context.Context, name string) (ScheduleFire, error) {
	if name == "" {
		return ScheduleFire{}, fmt.Errorf("jobfence: trigger schedule: %w", errNoScheduleName)
	}
	return s.s.Trigger(ctx, name)
}

// List returns the schedules of the schedules table, by name: those of
// every instance's Config.Schedules and those Put added.
func (s Schedules) List(ctx context.Context) ([]ScheduleInfo, error) {
	return scheduler.List(ctx, s.c.pg.Pool())
}

// Get returns the schedule name as the schedules table records it, or an
// error wrapping ErrScheduleNotFound.
func (s Schedules) Get(ctx context.Context, name string) (ScheduleInfo, error) {
	if name == "" {
		return ScheduleInfo{}, fmt.Errorf("jobfence: get schedule: %w", errNoScheduleName)
	}
	return scheduler.Get(ctx, s.c.pg.Pool(), name)
}
