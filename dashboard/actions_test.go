package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/dashboard"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// discardedJob enqueues a job of queue q and discards it: a job that
// Retry brings back.
func (d *dash) discardedJob(q string) int64 {
	d.t.Helper()
	id := d.enqueue(queue.EnqueueParams{Kind: "charge", Queue: q, Args: []byte(`{"amount":5}`)})
	j := d.claim(q, 1)[0]
	d.finish(j, queue.OutcomeDiscard, &queue.AttemptError{Attempt: 1, At: time.Now(), Error: "card declined"})
	return id
}

// TestRetryNeedsCSRFToken: a POST to /jobs/{id}/retry without the form's
// token, or with a wrong one, or with a token but not the cookie it was
// signed for, is refused and changes nothing; with both it retries.
func TestRetryNeedsCSRFToken(t *testing.T) {
	d := newDash(t, dashboard.Options{})
	id := d.discardedJob("billing")
	path := fmt.Sprintf("/jobs/%d/retry", id)
	token := d.token(fmt.Sprintf("/jobs/%d", id))

	stranger := &http.Client{CheckRedirect: d.client.CheckRedirect}
	for _, tt := range []struct {
		name   string
		client *http.Client
		form   url.Values
	}{
		{"no token", d.client, url.Values{}},
		{"wrong token", d.client, url.Values{"csrf": {"AAAA" + token[4:]}}},
		{"token without its cookie", stranger, url.Values{"csrf": {token}}},
	} {
		resp, err := tt.client.PostForm(d.URL+path, tt.form)
		if err != nil {
			t.Fatal(err)
		}
		body := readBody(t, resp)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "dashboard: refused: the form&#39;s CSRF token is missing or wrong; reload the page and try again") {
			t.Errorf("%s: POST %s = %d:\n%s", tt.name, path, resp.StatusCode, body)
		}
		if st := d.state(id); st != queue.StateDiscarded {
			t.Fatalf("%s: the job is %s after a refused retry, want discarded", tt.name, st)
		}
	}
	if !strings.Contains(d.Log.String(), "dashboard: action refused") {
		t.Errorf("refusals are not logged:\n%s", d.Log)
	}
	code, loc, body := d.post(path, url.Values{"csrf": {token}})
	if code != http.StatusSeeOther || loc != fmt.Sprintf("/jobs/%d?done=retried", id) {
		t.Fatalf("POST %s with the token = %d to %q:\n%s", path, code, loc, body)
	}
	if st := d.state(id); st != queue.StateAvailable {
		t.Fatalf("after the retry the job is %s, want available", st)
	}
	mustContain(t, "the job's page after the retry", d.getOK(loc), "The job will run again now.")
	mustContain(t, "the log", d.Log.String(), `msg="dashboard: action" action=/jobs/{id}/retry path=`+path+` by=anonymous@127.0.0.1 job=`+fmt.Sprint(id))
}

// TestReadOnly: a read-only dashboard shows no action and refuses every
// action, with a valid token too, saying why.
func TestReadOnly(t *testing.T) {
	d := newDash(t, dashboard.Options{ReadOnly: true})
	id := d.discardedJob("billing")
	page := d.getOK(fmt.Sprintf("/jobs/%d", id))
	if strings.Contains(page, `id="retry"`) || strings.Contains(page, "<form method=\"post\"") {
		t.Errorf("a read-only job page has action forms")
	}
	mustContain(t, "read-only page", page, `<span class="badge readonly"`)
	token := csrfRE.FindStringSubmatch(d.getOK("/"))
	if token != nil {
		t.Errorf("a read-only overview carries a form")
	}
	// Refused before the token is even looked at.
	for _, path := range []string{fmt.Sprintf("/jobs/%d/retry", id), fmt.Sprintf("/jobs/%d/delete", id), "/queues/pause", "/jobs/delete"} {
		code, _, body := d.post(path, url.Values{"csrf": {"x"}, "queue": {"billing"}})
		if code != http.StatusForbidden || !strings.Contains(body, "dashboard: refused: this dashboard is read-only (Options.ReadOnly, jobfence ui --read-only); actions are turned off") {
			t.Errorf("POST %s on a read-only dashboard = %d:\n%s", path, code, body)
		}
	}
	if st := d.state(id); st != queue.StateDiscarded {
		t.Fatalf("the job is %s, want discarded", st)
	}
	if qs, err := d.q.Queues(context.Background()); err != nil || len(qs) != 1 || qs[0].Paused {
		t.Fatalf("queues after a refused pause: %+v, %v", qs, err)
	}
}

// TestJobActions: cancel, retry (a completed job only when forced) and
// delete, each logged with who made it; refusals show the reason.
func TestJobActions(t *testing.T) {
	d := newDash(t, dashboard.Options{Actor: func(r *http.Request) string { return r.Header.Get("X-User") }})
	d.client.Transport = headerTransport{"X-User", "carol"}
	id := d.enqueue(queue.EnqueueParams{Kind: "charge", Queue: "billing"})
	token := d.token("/jobs")
	form := url.Values{"csrf": {token}}
	post := func(path string, wantCode int, want string) {
		t.Helper()
		code, loc, body := d.post(path, form)
		if code != wantCode || !strings.Contains(loc+body, want) {
			t.Errorf("POST %s = %d to %q, want %d with %q:\n%s", path, code, loc, wantCode, want, body)
		}
	}
	post(fmt.Sprintf("/jobs/%d/cancel", id), http.StatusSeeOther, "?done=cancelled")
	if st := d.state(id); st != queue.StateCancelled {
		t.Fatalf("after cancel: %s", st)
	}
	post(fmt.Sprintf("/jobs/%d/cancel", id), http.StatusConflict, "it is already cancelled")

	done := d.enqueue(queue.EnqueueParams{Kind: "charge", Queue: "done"})
	d.finish(d.claim("done", 1)[0], queue.OutcomeComplete, nil)
	post(fmt.Sprintf("/jobs/%d/retry", done), http.StatusConflict, "the job completed already; retrying it would run it again: tick &#34;run it again&#34; to retry it anyway")
	form.Set("force", "1")
	post(fmt.Sprintf("/jobs/%d/retry", done), http.StatusSeeOther, "?done=retried")
	form.Del("force")
	if st := d.state(done); st != queue.StateAvailable {
		t.Fatalf("after a forced retry: %s", st)
	}
	running := d.claim("done", 1)[0]
	post(fmt.Sprintf("/jobs/%d/delete", running.ID), http.StatusConflict, "the job is running; cancel it first")
	post(fmt.Sprintf("/jobs/%d/delete", id), http.StatusSeeOther, "/jobs?done=deleted")
	if _, err := d.q.Get(context.Background(), id); err == nil {
		t.Fatalf("job %d is still there after delete", id)
	}
	post(fmt.Sprintf("/jobs/%d/delete", id), http.StatusNotFound, "jobfence: job not found")
	post("/jobs/x/retry", http.StatusBadRequest, "job ID &#34;x&#34; is not a number")
	if code, _, _ := d.post(fmt.Sprintf("/jobs/%d/retry", id), nil); code != http.StatusForbidden {
		t.Errorf("an action without a form = %d, want 403", code)
	}
	// Actions are POST only: a GET (a link, a prefetch) changes nothing.
	if code, _ := d.get(fmt.Sprintf("/jobs/%d/cancel", done)); code != http.StatusNotFound || d.state(done) != queue.StateRunning {
		t.Errorf("GET of an action = %d, job %s; want 404 and the job still running", code, d.state(done))
	}
	mustContain(t, "the log", d.Log.String(),
		fmt.Sprintf(`msg="dashboard: action" action=/jobs/{id}/cancel path=/jobs/%d/cancel by=carol job=%d`, id, id),
		fmt.Sprintf(`msg="dashboard: action failed" action=/jobs/{id}/delete path=/jobs/%d/delete by=carol error="pgqueue: delete job %d: jobfence: the job is running; cancel it first" job=%d`, running.ID, running.ID, running.ID),
		fmt.Sprintf(`msg="dashboard: action" action=/jobs/{id}/retry path=/jobs/%d/retry by=carol job=%d force=true`, done, done))
}

// headerTransport adds a header to every request, as an authenticating
// proxy in front of a service would.
type headerTransport struct{ name, value string }

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.name, h.value)
	return http.DefaultTransport.RoundTrip(r)
}

// TestBulkActions: retry and delete every job of a filter, across pages,
// leaving other queues and running jobs alone.
func TestBulkActions(t *testing.T) {
	d := newDash(t, dashboard.Options{})
	var ids []int64
	for range 60 {
		ids = append(ids, d.enqueue(queue.EnqueueParams{Kind: "mail", Queue: "bulk"}))
	}
	for _, id := range ids {
		if err := d.q.Cancel(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	other := d.discardedJob("other")
	page := d.getOK("/jobs?queue=bulk&state=cancelled")
	mustContain(t, "the filtered job list", page, "Retry all matching", "Delete all matching", `data-confirm="Delete every job`)
	token := csrfRE.FindStringSubmatch(page)[1]
	code, loc, body := d.post("/jobs/retry", url.Values{"csrf": {token}, "queue": {"bulk"}, "state": {"cancelled"}})
	if code != http.StatusSeeOther || loc != "/jobs?done=retried-n&n=60&queue=bulk&state=cancelled" {
		t.Fatalf("bulk retry = %d to %q:\n%s", code, loc, body)
	}
	mustContain(t, "the page after a bulk retry", d.getOK(loc), "Retried 60 jobs.")
	counts, err := d.q.Counts(context.Background(), "bulk")
	if err != nil || counts[queue.StateAvailable] != 60 {
		t.Fatalf("bulk after the retry: %v %v", counts, err)
	}
	code, loc, _ = d.post("/jobs/delete", url.Values{"csrf": {token}, "queue": {"bulk"}})
	if code != http.StatusSeeOther || !strings.Contains(loc, "done=deleted-n&n=60") {
		t.Fatalf("bulk delete = %d to %q", code, loc)
	}
	if st := d.state(other); st != queue.StateDiscarded {
		t.Fatalf("the other queue's job is %s, want discarded", st)
	}
	code, _, body = d.post("/jobs/retry", url.Values{"csrf": {token}, "state": {"completed"}})
	if code != http.StatusConflict || !strings.Contains(body, "completed jobs ran successfully") {
		t.Errorf("bulk retry of completed jobs = %d:\n%s", code, body)
	}
	code, _, body = d.post("/jobs/delete", url.Values{"csrf": {token}, "state": {"gone"}})
	if code != http.StatusBadRequest || !strings.Contains(body, "unknown job state &#34;gone&#34;") {
		t.Errorf("bulk delete of an unknown state = %d:\n%s", code, body)
	}
	mustContain(t, "the log", d.Log.String(), `msg="dashboard: action" action=/jobs/retry path=/jobs/retry by=anonymous@127.0.0.1 queue=bulk kind="" state=cancelled jobs=60`)
}

// TestPauseResume: the queue's buttons pause and resume it for the fleet,
// naming who did it.
func TestPauseResume(t *testing.T) {
	d := newDash(t, dashboard.Options{})
	d.enqueue(queue.EnqueueParams{Kind: "mail", Queue: "email"})
	token := d.token("/queues")
	req, _ := http.NewRequest(http.MethodPost, d.URL+"/queues/pause", strings.NewReader(url.Values{"csrf": {token}, "queue": {"email"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth("dave", "secret")
	resp, err := d.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("pause = %d", resp.StatusCode)
	}
	qs, err := d.q.Queues(context.Background())
	if err != nil || len(qs) != 1 || !qs[0].Paused || qs[0].PausedBy != "dave" {
		t.Fatalf("after pause: %+v, %v; want email paused by dave (the basic-auth user)", qs, err)
	}
	page := d.getOK("/queues?done=paused")
	mustContain(t, "/queues", page, "by dave", "The queue is paused", `class="resume"`)
	mustContain(t, "/", d.getOK("/"), `<span class="badge paused"`)
	if code, _, _ := d.post("/queues/resume", url.Values{"csrf": {token}, "queue": {"email"}}); code != http.StatusSeeOther {
		t.Fatalf("resume = %d", code)
	}
	if qs, _ := d.q.Queues(context.Background()); qs[0].Paused {
		t.Fatalf("email is still paused after resume")
	}
	code, _, body := d.post("/queues/pause", url.Values{"csrf": {token}, "queue": {""}})
	if code != http.StatusBadRequest || !strings.Contains(body, "a queue name is required") {
		t.Errorf("pause without a name = %d:\n%s", code, body)
	}
	mustContain(t, "the log", d.Log.String(), `action=/queues/pause path=/queues/pause by=dave queue=email`, `action=/queues/resume path=/queues/resume by=anonymous@127.0.0.1 queue=email`)
}

// TestBasePath: mounted under a path, the dashboard links and redirects
// under it, scopes its cookie to it, and answers nothing outside it.
func TestBasePath(t *testing.T) {
	d := newDash(t, dashboard.Options{BasePath: "/admin/jobs/"})
	id := d.discardedJob("billing")
	page := d.getOK("/")
	mustContain(t, "the overview under /admin/jobs", page, `href="/admin/jobs/static/style.css"`, `href="/admin/jobs/jobs?queue=billing"`, `href="/admin/jobs/queues"`)
	resp, err := d.client.Get(d.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/admin/jobs/" {
		t.Errorf("GET /admin/jobs = %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	u, _ := url.Parse(d.URL + "/")
	cookies := d.client.Jar.Cookies(u)
	if len(cookies) != 1 || cookies[0].Name != "jobfence_csrf" {
		t.Fatalf("cookies under the base: %v", cookies)
	}
	if outside, _ := url.Parse(d.srv.URL + "/"); len(d.client.Jar.Cookies(outside)) != 0 {
		t.Errorf("the CSRF cookie is sent outside the base path")
	}
	token := d.token(fmt.Sprintf("/jobs/%d", id))
	code, loc, _ := d.post(fmt.Sprintf("/jobs/%d/retry", id), url.Values{"csrf": {token}})
	if code != http.StatusSeeOther || loc != fmt.Sprintf("/admin/jobs/jobs/%d?done=retried", id) {
		t.Errorf("retry under the base = %d to %q", code, loc)
	}
}

// TestFleetQueueAction: the queue page's fleet form stores a queue's
// concurrency, adds, removes and resets it, naming who did it; it needs
// the form's CSRF token, and bad input gets a message that says what is
// wrong.
func TestFleetQueueAction(t *testing.T) {
	d := newDash(t, dashboard.Options{})
	d.enqueue(queue.EnqueueParams{Kind: "mail", Queue: "email"})
	token := d.token("/queues")
	if code, _, body := d.post("/queues/fleet", url.Values{"queue": {"email"}, "op": {"set"}, "concurrency": {"3"}}); code != http.StatusForbidden ||
		!strings.Contains(body, "CSRF token is missing or wrong") {
		t.Errorf("fleet set without the CSRF token = %d:\n%s", code, body)
	}
	stored := func() pgqueue.QueueInfo {
		t.Helper()
		qs, err := d.q.Queues(context.Background())
		if err != nil || len(qs) == 0 {
			t.Fatalf("queues: %+v, %v", qs, err)
		}
		return qs[0]
	}
	if q := stored(); q.Concurrency != 0 || q.Run != queue.RunConfigured {
		t.Fatalf("a refused action stored %+v", q)
	}
	for _, tc := range []struct {
		form url.Values
		done string
		conc int
		run  queue.QueueRun
	}{
		{url.Values{"op": {"set"}, "concurrency": {"3"}}, "fleet-set", 3, queue.RunConfigured},
		{url.Values{"op": {"add"}, "concurrency": {" 5 "}}, "fleet-add", 5, queue.RunStarted},
		{url.Values{"op": {"remove"}}, "fleet-remove", 5, queue.RunStopped},
		{url.Values{"op": {"reset"}}, "fleet-reset", 0, queue.RunConfigured},
	} {
		tc.form.Set("csrf", token)
		tc.form.Set("queue", "email")
		code, loc, body := d.post("/queues/fleet", tc.form)
		if code != http.StatusSeeOther || loc != "/queues?done="+tc.done {
			t.Fatalf("%v = %d to %q:\n%s", tc.form, code, loc, body)
		}
		if q := stored(); q.Concurrency != tc.conc || q.Run != tc.run || q.UpdatedBy != "anonymous@127.0.0.1" {
			t.Errorf("after %s: concurrency %d, run %q, by %q; want %d, %q", tc.form.Get("op"), q.Concurrency, q.Run, q.UpdatedBy, tc.conc, tc.run)
		}
	}
	for _, tc := range []struct {
		form url.Values
		code int
		want string
	}{
		{url.Values{"queue": {"email"}, "op": {"set"}, "concurrency": {"many"}}, http.StatusBadRequest, "concurrency &#34;many&#34; is not a whole number"},
		{url.Values{"queue": {"email"}, "op": {"add"}, "concurrency": {"0"}}, http.StatusBadRequest,
			"jobfence: bad queue concurrency: queue &#34;email&#34;: concurrency 0 is out of range: it must be between 1 and 10000"},
		{url.Values{"queue": {""}, "op": {"set"}, "concurrency": {"2"}}, http.StatusBadRequest, "a queue name is required"},
		{url.Values{"queue": {"nosuch"}, "op": {"remove"}}, http.StatusBadRequest, "unknown queue: no worker works it and nothing is stored for it"},
		{url.Values{"queue": {"email"}, "op": {"explode"}}, http.StatusBadRequest, "unknown queue operation &#34;explode&#34;: want set, add, remove or reset"},
	} {
		tc.form.Set("csrf", token)
		if code, _, body := d.post("/queues/fleet", tc.form); code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%v = %d, want %d and %q:\n%s", tc.form, code, tc.code, tc.want, body)
		}
	}
	mustContain(t, "the log", d.Log.String(), `action=/queues/fleet path=/queues/fleet by=anonymous@127.0.0.1 queue=email op=set concurrency=3`)
}
