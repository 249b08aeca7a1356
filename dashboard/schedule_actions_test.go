package dashboard_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/dashboard"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/scheduler"
)

// fires counts the jobs of schedule name's fires, and of its triggers
// (keys ending in -run).
func (d *dash) fires(name string) (fires, triggers int) {
	d.t.Helper()
	if err := d.db.Pool.QueryRow(context.Background(), `
SELECT count(*) FILTER (WHERE unique_key NOT LIKE '%-run'), count(*) FILTER (WHERE unique_key LIKE '%-run')
FROM jobfence_jobs WHERE starts_with(unique_key, $1)`, "cron:"+name+":").Scan(&fires, &triggers); err != nil {
		d.t.Fatal(err)
	}
	return fires, triggers
}

// TestScheduleActions: with a scheduler instance running a per-second
// schedule, the schedules page's buttons over HTTP: Pause (no more fires;
// the page says paused, by whom, and offers Resume), Run now twice (one
// job), Resume (fires again), each logged with who made it; an unknown
// schedule is 404.
func TestScheduleActions(t *testing.T) {
	d := newDash(t, dashboard.Options{Actor: func(r *http.Request) string { return r.Header.Get("X-User") }})
	d.client.Transport = headerTransport{"X-User", "carol"}
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	s := scheduler.New(pgqueue.New(d.db.Pool, pgqueue.Config{Logger: quiet}), scheduler.Config{Logger: quiet, SyncInterval: 200 * time.Millisecond})
	if _, err := s.Put(ctx, "rt", "* * * * * *", "tick", nil, scheduler.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	testwatch.WaitFor(t, 30*time.Second, "a fire", func() bool { f, _ := d.fires("rt"); return f > 0 })

	page := d.getOK("/schedules")
	row := regexp.MustCompile(`(?s)<tr data-schedule="rt">.*?</tr>`).FindString(page)
	mustContain(t, "rt's row", row, `action="/schedules/pause"`, `action="/schedules/trigger"`, `>Run now</button>`, `run time</span>`, `<td>active`)
	token := d.token("/schedules")
	post := func(path, name string, wantCode int, want string) string {
		t.Helper()
		code, loc, body := d.post(path, url.Values{"csrf": {token}, "name": {name}})
		if code != wantCode || !strings.Contains(loc+body, want) {
			t.Fatalf("POST %s name=%s = %d to %q, want %d with %q:\n%s", path, name, code, loc, wantCode, want, body)
		}
		return loc
	}

	loc := post("/schedules/pause", "rt", http.StatusSeeOther, "/schedules?done=schedule-paused")
	paused, _ := d.fires("rt")
	page = d.getOK(loc)
	mustContain(t, "the page after Pause", page, "The schedule is paused: no instance enqueues its fires until it is resumed.")
	row = regexp.MustCompile(`(?s)<tr data-schedule="rt">.*?</tr>`).FindString(page)
	mustContain(t, "rt's row when paused", row, `<span class="badge paused">paused</span>`, "by carol", `action="/schedules/resume"`, `>Resume</button>`)
	time.Sleep(2700 * time.Millisecond)
	if f, _ := d.fires("rt"); f != paused {
		t.Fatalf("%d fires enqueued while paused", f-paused)
	}

	loc = post("/schedules/trigger", "rt", http.StatusSeeOther, "/schedules?done=schedule-triggered&n=")
	again := post("/schedules/trigger", "rt", http.StatusSeeOther, "/schedules?done=schedule-trigger-joined&n=")
	id := strings.TrimPrefix(loc, "/schedules?done=schedule-triggered&n=")
	if !strings.HasSuffix(again, "&n="+id) {
		t.Fatalf("the second Run now went to %q, want the first one's job %s", again, id)
	}
	if _, tr := d.fires("rt"); tr != 1 {
		t.Fatalf("%d jobs of two Run now clicks, want 1", tr)
	}
	mustContain(t, "the page after Run now", d.getOK(loc), fmt.Sprintf("Run now: job %s is enqueued.", id))
	mustContain(t, "the page after a second Run now", d.getOK(again), fmt.Sprintf("its job %s stands; no job was added.", id))

	loc = post("/schedules/resume", "rt", http.StatusSeeOther, "/schedules?done=schedule-resumed")
	mustContain(t, "the page after Resume", d.getOK(loc), "The schedule is resumed")
	testwatch.WaitFor(t, 30*time.Second, "a fire after the resume", func() bool { f, _ := d.fires("rt"); return f > paused })

	post("/schedules/pause", "nope", http.StatusNotFound, "no such schedule")
	post("/schedules/trigger", "", http.StatusBadRequest, "the form names no schedule")
	mustContain(t, "the log", d.Log.String(),
		`msg="dashboard: action" action=/schedules/pause path=/schedules/pause by=carol schedule=rt changed=true`,
		`msg="dashboard: action" action=/schedules/trigger path=/schedules/trigger by=carol schedule=rt job=`+id,
		`msg="dashboard: action" action=/schedules/resume path=/schedules/resume by=carol schedule=rt changed=true`)
}

// TestScheduleActionsReadOnly: a read-only dashboard shows no schedule
// button and refuses the actions, changing nothing.
func TestScheduleActionsReadOnly(t *testing.T) {
	d := newDash(t, dashboard.Options{ReadOnly: true})
	ctx := context.Background()
	if _, err := scheduler.Put(ctx, d.db.Pool, "rt", "@hourly", "tick", nil, scheduler.Options{}); err != nil {
		t.Fatal(err)
	}
	page := d.getOK("/schedules")
	if strings.Contains(page, "<form") || strings.Contains(page, ">Run now</button>") {
		t.Errorf("a read-only schedules page has action forms:\n%s", page)
	}
	for _, path := range []string{"/schedules/pause", "/schedules/resume", "/schedules/trigger"} {
		code, _, body := d.post(path, url.Values{"csrf": {"x"}, "name": {"rt"}})
		if code != http.StatusForbidden || !strings.Contains(body, "dashboard: refused: this dashboard is read-only") {
			t.Errorf("POST %s on a read-only dashboard = %d:\n%s", path, code, body)
		}
	}
	if i, err := scheduler.Get(ctx, d.db.Pool, "rt"); err != nil || i.Paused || !i.TriggeredAt.IsZero() {
		t.Fatalf("after refused actions: %+v, %v", i, err)
	}
	if _, tr := d.fires("rt"); tr != 0 {
		t.Fatalf("%d jobs after a refused Run now", tr)
	}
}
