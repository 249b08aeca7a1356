package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/dashboard"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// jobCount counts every job in the dashboard's schema.
func (d *dash) jobCount() int {
	d.t.Helper()
	jobs, err := d.q.List(context.Background(), pgqueue.ListParams{Limit: 1000})
	if err != nil {
		d.t.Fatal(err)
	}
	return len(jobs)
}

// insertedID reads the job ID of an insert's redirect.
func insertedID(t *testing.T, loc string) int64 {
	t.Helper()
	s, ok := strings.CutSuffix(strings.TrimPrefix(loc, "/jobs/"), "?done=inserted")
	id, err := strconv.ParseInt(s, 10, 64)
	if !ok || err != nil {
		t.Fatalf("the insert went to %q, want /jobs/<id>?done=inserted", loc)
	}
	return id
}

// TestInsertJob: the jobs page links to the insert form with its filter's
// queue and kind filled in; the form inserts a job with every field it
// has, or with the defaults, shows it and logs who inserted it.
func TestInsertJob(t *testing.T) {
	d := newDash(t, dashboard.Options{Actor: func(r *http.Request) string { return r.Header.Get("X-User") }})
	d.client.Transport = headerTransport{"X-User", "carol"}
	ctx := context.Background()

	mustContain(t, "the filtered jobs page", d.getOK("/jobs?queue=billing&kind=charge"), `href="/jobs/new?queue=billing&amp;kind=charge" id="insert-link"`)
	form := d.getOK("/jobs/new?queue=billing&kind=charge")
	mustContain(t, "the insert form", form, `action="/jobs"`, `id="insert-queue" value="billing"`, `id="insert-kind" value="charge"`, `name="args"`, `name="priority"`, `name="scheduled_at"`, `name="max_attempts"`)
	token := d.token("/jobs/new")

	at := time.Now().UTC().Add(48 * time.Hour).Truncate(time.Second)
	code, loc, body := d.post("/jobs", url.Values{"csrf": {token}, "queue": {"billing"}, "kind": {"charge"},
		"args": {"{\n  \"amount\": 1250,\n  \"note\": \"<b>refund</b>\"\n}"}, "priority": {"2"},
		"scheduled_at": {at.Format("2006-01-02T15:04:05")}, "max_attempts": {"3"}})
	if code != http.StatusSeeOther {
		t.Fatalf("POST /jobs = %d:\n%s", code, body)
	}
	id := insertedID(t, loc)
	j, err := d.q.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var args map[string]any
	if err := json.Unmarshal(j.EncodedArgs, &args); err != nil || args["amount"] != 1250.0 || args["note"] != "<b>refund</b>" {
		t.Errorf("args %s (%v)", j.EncodedArgs, err)
	}
	if j.Queue != "billing" || j.Kind != "charge" || j.Priority != 2 || j.MaxAttempts != 3 || !j.ScheduledAt.Equal(at) || j.State != queue.StateScheduled {
		t.Errorf("inserted %+v; want billing/charge, priority 2, 3 attempts, scheduled at %s", j, at)
	}
	mustContain(t, "the job's page after the insert", d.getOK(loc), "The job is inserted.", `&#34;amount&#34;: 1250`)
	mustContain(t, "the log", d.Log.String(), fmt.Sprintf(`msg="dashboard: action" action=/jobs path=/jobs by=carol queue=billing kind=charge job=%d`, id))

	// Only a kind: the defaults.
	code, loc, body = d.post("/jobs", url.Values{"csrf": {token}, "kind": {"ping"}, "args": {""}})
	if code != http.StatusSeeOther {
		t.Fatalf("POST /jobs with a kind alone = %d:\n%s", code, body)
	}
	j, err = d.q.Get(ctx, insertedID(t, loc))
	if err != nil {
		t.Fatal(err)
	}
	if j.Queue != queue.DefaultQueue || j.Priority != queue.DefaultPriority || j.MaxAttempts != queue.DefaultMaxAttempts ||
		string(j.EncodedArgs) != "{}" || j.State != queue.StateAvailable || j.ScheduledAt.After(time.Now().Add(time.Minute)) {
		t.Errorf("a job with a kind alone: %+v, args %s; want the defaults, ready now", j, j.EncodedArgs)
	}
}

// TestInsertJobRefusesBadInput: each wrong field is refused with 400 and
// a message that says what is wrong, and nothing is inserted; a form
// without the CSRF token is refused too.
func TestInsertJobRefusesBadInput(t *testing.T) {
	d := newDash(t, dashboard.Options{})
	token := d.token("/jobs/new")
	for _, tc := range []struct {
		name   string
		fields map[string]string
		want   string
	}{
		{"no kind", map[string]string{"kind": " "}, "the job needs a kind"},
		{"a trailing comma", map[string]string{"args": "{\n  \"amount\": 1250,\n}"}, "args: not valid JSON at line 3, column 1: invalid character &#39;}&#39; looking for beginning of object key string"},
		{"not closed", map[string]string{"args": `{"amount": 1250`}, "args: not valid JSON: unexpected EOF"},
		{"an array", map[string]string{"args": `[1, 2]`}, "args: a JSON object ({...}) is needed, not an array"},
		{"two values", map[string]string{"args": `{} {}`}, "args: not valid JSON: more than one value; give one object"},
		{"priority 9", map[string]string{"priority": "9"}, fmt.Sprintf(`priority &#34;9&#34;: a number from 1 (first) to 4 (last), or empty for %d`, queue.DefaultPriority)},
		{"no attempts", map[string]string{"max_attempts": "0"}, fmt.Sprintf(`max attempts &#34;0&#34;: a whole number of at least 1, or empty for %d`, queue.DefaultMaxAttempts)},
		{"a time in words", map[string]string{"scheduled_at": "tomorrow"}, `scheduled at &#34;tomorrow&#34;: a time as YYYY-MM-DDTHH:MM in UTC (or RFC 3339), or empty for now`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			form := url.Values{"csrf": {token}, "queue": {"billing"}, "kind": {"charge"}, "args": {"{}"}}
			for k, v := range tc.fields {
				form.Set(k, v)
			}
			code, _, body := d.post("/jobs", form)
			if code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
				t.Errorf("POST /jobs = %d, want 400 saying %q:\n%s", code, tc.want, body)
			}
		})
	}
	code, _, body := d.post("/jobs", url.Values{"kind": {"charge"}, "args": {"{}"}})
	if code != http.StatusForbidden || !strings.Contains(body, "the form&#39;s CSRF token is missing or wrong") {
		t.Errorf("POST /jobs without a token = %d:\n%s", code, body)
	}
	if n := d.jobCount(); n != 0 {
		t.Fatalf("%d jobs after refused inserts", n)
	}
}

// TestInsertJobReadOnly: a read-only dashboard has no insert form and
// refuses an insert, inserting nothing.
func TestInsertJobReadOnly(t *testing.T) {
	d := newDash(t, dashboard.Options{ReadOnly: true})
	if page := d.getOK("/jobs"); strings.Contains(page, "insert-link") {
		t.Errorf("a read-only jobs page links to the insert form")
	}
	const readOnly = "dashboard: refused: this dashboard is read-only"
	if code, body := d.get("/jobs/new"); code != http.StatusForbidden || !strings.Contains(body, readOnly) || strings.Contains(body, "<form") {
		t.Errorf("GET /jobs/new on a read-only dashboard = %d:\n%s", code, body)
	}
	code, _, body := d.post("/jobs", url.Values{"csrf": {"x"}, "kind": {"charge"}, "args": {"{}"}})
	if code != http.StatusForbidden || !strings.Contains(body, readOnly) {
		t.Errorf("POST /jobs on a read-only dashboard = %d:\n%s", code, body)
	}
	if n := d.jobCount(); n != 0 {
		t.Fatalf("%d jobs after a refused insert", n)
	}
}
