package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/jobfence/jobfence/scheduler"
)

// scheduleName reads the name of the schedule an action is about from its
// form.
func scheduleName(r *http.Request) (string, error) {
	name := r.PostFormValue("name")
	if name == "" {
		return "", badRequest("the form names no schedule")
	}
	return name, nil
}

// scheduleActionError gives a schedule that is not there 404.
func scheduleActionError(err error) error {
	if errors.Is(err, scheduler.ErrNotFound) {
		return &httpError{status: http.StatusNotFound, msg: err.Error()}
	}
	return err
}

// pauseSchedule pauses a schedule for the whole fleet: no instance
// enqueues its fires until it is resumed.
func (h *handler) pauseSchedule(r *http.Request, actor string) (string, []any, error) {
	name, err := scheduleName(r)
	if err != nil {
		return "", nil, err
	}
	changed, err := scheduler.Pause(r.Context(), h.pool, name, actor)
	return "/schedules?done=schedule-paused", []any{"schedule", name, "changed", changed}, scheduleActionError(err)
}

// resumeSchedule resumes a paused schedule.
func (h *handler) resumeSchedule(r *http.Request, _ string) (string, []any, error) {
	name, err := scheduleName(r)
	if err != nil {
		return "", nil, err
	}
	changed, err := scheduler.Resume(r.Context(), h.pool, name)
	return "/schedules?done=schedule-resumed", []any{"schedule", name, "changed", changed}, scheduleActionError(err)
}

// triggerSchedule enqueues one fire of a schedule now ("Run now"). A
// second click within scheduler.TriggerWindow, or the same form posted
// to two instances of the dashboard, makes no second job.
func (h *handler) triggerSchedule(r *http.Request, _ string) (string, []any, error) {
	name, err := scheduleName(r)
	if err != nil {
		return "", nil, err
	}
	f, err := scheduler.Trigger(r.Context(), h.client, name)
	if err != nil {
		return "", []any{"schedule", name}, scheduleActionError(err)
	}
	done := "schedule-triggered"
	if !f.Inserted {
		done = "schedule-trigger-joined"
	}
	return "/schedules?done=" + done + "&n=" + strconv.FormatInt(f.JobID, 10),
		[]any{"schedule", name, "job", f.JobID, "fire", f.At, "inserted", f.Inserted}, nil
}

// scheduleFlash says what a schedule action that redirected here did, or
// "" for another outcome.
func scheduleFlash(done string, n int64) string {
	switch done {
	case "schedule-paused":
		return "The schedule is paused: no instance enqueues its fires until it is resumed."
	case "schedule-resumed":
		return "The schedule is resumed: every instance enqueues its fires again within a few seconds; those of the pause are not caught up."
	case "schedule-triggered":
		return fmt.Sprintf("Run now: job %d is enqueued.", n)
	case "schedule-trigger-joined":
		return fmt.Sprintf("The schedule was run less than %v ago: its job %d stands; no job was added.", scheduler.TriggerWindow, n)
	}
	return ""
}
