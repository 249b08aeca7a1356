package dashboard

import (
	"net/http"
	"time"

	"github.com/jobfence/jobfence/scheduler"
)

// maxCountedMissed caps the missed fires counted per schedule, so a
// schedule of every second that no instance ran for a month does not
// stall the page.
const maxCountedMissed = 1000

// scheduleRow is one schedule of /schedules.
type scheduleRow struct {
	scheduler.Info
	// Missed counts fires due more than scheduler.DefaultGrace ago that
	// no instance has enqueued (up to maxCountedMissed): the schedule has
	// no scheduler running, or its enqueues fail. Whether they are caught
	// up later depends on CatchUp.
	Missed int
	// MissedMore is true when there are more than Missed.
	MissedMore bool
	// SpecError is why the stored spec does not parse, if it does not.
	SpecError string
}

// schedules serves /schedules: every registered cron schedule, with
// buttons to pause, resume and run each one now (none when read-only).
func (h *handler) schedules(w http.ResponseWriter, r *http.Request) error {
	infos, err := scheduler.List(r.Context(), h.pool)
	if err != nil {
		return err
	}
	now := time.Now()
	rows := make([]scheduleRow, 0, len(infos))
	for _, i := range infos {
		row := scheduleRow{Info: i}
		spec, err := scheduler.ParseSpec(i.Spec, i.TimeZone)
		switch {
		case err != nil:
			row.SpecError = err.Error()
		case !i.Paused:
			row.Missed, row.MissedMore = missedFires(spec, i.NextFire, now.Add(-scheduler.DefaultGrace))
		}
		rows = append(rows, row)
	}
	return h.render(w, r, http.StatusOK, "schedules", "Schedules", now, rows)
}

// missedFires counts the fires from next (the first fire not enqueued) up
// to until, at most maxCountedMissed of them; more says there are others.
func missedFires(spec *scheduler.Spec, next, until time.Time) (n int, more bool) {
	for f := next; !f.IsZero() && !f.After(until); f = spec.Next(f) {
		if n == maxCountedMissed {
			return n, true
		}
		n++
	}
	return n, false
}
