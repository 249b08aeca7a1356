package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/dashboard"
	"github.com/jobfence/jobfence/idempotency"
	"github.com/jobfence/jobfence/queue"
)

// TestPages: every page answers 200 with what it is for, and with the
// security headers.
func TestPages(t *testing.T) {
	d := newDash(t, dashboard.Options{})
	ctx := context.Background()
	id := d.enqueue(queue.EnqueueParams{Kind: "invoice", Queue: "billing", Args: []byte(`{"customer":42,"lines":[1,2]}`)})
	d.enqueue(queue.EnqueueParams{Kind: "invoice", Queue: "billing", ScheduledAt: time.Now().Add(time.Hour)})
	failed := d.enqueue(queue.EnqueueParams{Kind: "mail", Queue: "email", MaxAttempts: 3})
	j := d.claim("email", 1)[0]
	d.finish(j, queue.OutcomeRetry, &queue.AttemptError{Attempt: 1, At: time.Now(), Error: "smtp: 554 rejected", Trace: "goroutine 7 [running]:\nmain.send()"})
	if err := d.q.PauseQueue(ctx, "email", "alice"); err != nil {
		t.Fatal(err)
	}
	if err := d.q.Register(ctx, queue.Instance{ID: "web-1", Host: "host-a", PID: 4242, Queues: []string{"billing", "email"},
		Running: 2, Completed: 10, Stale: 3, StartedAt: time.Now(), Interval: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.db.Pool.Exec(ctx, `INSERT INTO jobfence_schedules (name, spec, time_zone, kind, queue, catch_up, skip_if_running, next_fire, last_fire)
		VALUES ('nightly', '0 3 * * *', 'Europe/Paris', 'report', 'reports', 'skip', true, now() + interval '1 hour', now() - interval '23 hours')`); err != nil {
		t.Fatal(err)
	}
	keys := idempotency.New(d.db.Pool, idempotency.Options{Scope: "charges"})
	if _, err := keys.Do(ctx, "order-77", "fp", func(context.Context) ([]byte, error) { return []byte(`{"ok":true}`), nil }); err != nil {
		t.Fatal(err)
	}
	if err := idempotency.NewResultStore(d.db.Pool, "charges").Put(ctx, "balance-9", 12, []byte("100")); err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct {
		path string
		want []string
	}{
		{"/", []string{`<tr data-queue="billing">`, `<tr data-queue="email">`, `<span class="value" id="live-workers"><a href="/workers">1</a></span>`,
			`<span class="value" id="stale-outcomes">3</span>`, `<span class="badge paused"`}},
		{"/jobs", []string{fmt.Sprintf(`href="/jobs/%d"`, id), "smtp: 554 rejected", `<option value="retryable">retryable</option>`}},
		{"/jobs?queue=email&state=retryable", []string{fmt.Sprintf(`href="/jobs/%d"`, failed)}},
		{fmt.Sprintf("/jobs/%d", id), []string{"&#34;lines&#34;: [\n    1,\n    2\n  ],\n  &#34;customer&#34;: 42\n}", "billing", `id="retry"`, `id="cancel"`}},
		{fmt.Sprintf("/jobs/%d", failed), []string{"Attempt 1", "smtp: 554 rejected", "goroutine 7 [running]:\nmain.send()", "test-worker", "attempt 1 failed"}},
		{"/queues", []string{`<tr data-queue="email">`, "by alice", `class="resume"`, `class="pause"`}},
		{"/schedules", []string{"nightly", "<code>0 3 * * *</code>", "Europe/Paris", "<td>yes</td>"}},
		{"/workers", []string{"<code>web-1</code>", "host-a", "4242", "billing, email", `<span class="badge live">live</span>`}},
		{"/keys", []string{"charges", "<code>order-77</code>", "completed", "<code>balance-9</code>", "11 B"}},
		{"/metrics", []string{`jobfence_queue_jobs{queue="billing",state="available"} 1`}},
	} {
		resp, err := d.client.Get(d.URL + tt.path)
		if err != nil {
			t.Fatal(err)
		}
		body := readBody(t, resp)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s = %d:\n%s", tt.path, resp.StatusCode, body)
			continue
		}
		mustContain(t, "GET "+tt.path, body, tt.want...)
		for h, want := range map[string]string{
			"X-Content-Type-Options": "nosniff",
			"X-Frame-Options":        "DENY",
		} {
			if got := resp.Header.Get(h); got != want {
				t.Errorf("GET %s: %s = %q, want %q", tt.path, h, got, want)
			}
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "unsafe-inline") {
			t.Errorf("GET %s: Content-Security-Policy %q", tt.path, csp)
		}
	}
	if code, body := d.get("/jobs/999999"); code != http.StatusNotFound || !strings.Contains(body, "job 999999: jobfence: job not found") {
		t.Errorf("GET /jobs/999999 = %d %s", code, body)
	}
	if code, _ := d.get("/nope"); code != http.StatusNotFound {
		t.Errorf("GET /nope = %d, want 404", code)
	}
	if code, body := d.get("/static/app.js"); code != http.StatusOK || !strings.Contains(body, "data-confirm") {
		t.Errorf("GET /static/app.js = %d", code)
	}
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestEscaping: job arguments, errors, queue and kind names are user data;
// every page shows them escaped, never as markup.
func TestEscaping(t *testing.T) {
	d := newDash(t, dashboard.Options{})
	const evil = `<script>alert("pwned")</script>`
	id := d.enqueue(queue.EnqueueParams{Kind: `k<img src=x onerror=alert(1)>`, Queue: `q"><script>alert(2)</script>`,
		Args: []byte(`{"html":"<script>alert(\"pwned\")</script>"}`), UniqueKey: `key<b>bold</b>`, Metadata: map[string]string{"note": evil}})
	j := d.claim(`q"><script>alert(2)</script>`, 1)[0]
	d.finish(j, queue.OutcomeRetry, &queue.AttemptError{Attempt: 1, At: time.Now(), Error: evil, Trace: evil})
	if err := d.q.PauseQueue(context.Background(), `q"><script>alert(2)</script>`, evil); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/", "/jobs", fmt.Sprintf("/jobs/%d", id), "/queues", "/jobs?kind=" + strings.ReplaceAll(evil, " ", "+")} {
		body := d.getOK(path)
		if strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") || strings.Contains(body, "<b>bold") {
			t.Errorf("GET %s has unescaped user data:\n%s", path, body)
		}
		if !strings.Contains(body, "&lt;script&gt;alert(") && !strings.Contains(body, "%3cscript%3e") {
			t.Errorf("GET %s does not show the escaped <script>", path)
		}
	}
	metrics := d.getOK("/metrics")
	if !strings.Contains(metrics, `queue="q\"><script>alert(2)</script>"`) {
		t.Errorf("/metrics does not escape the queue label's quote:\n%s", metrics)
	}
}

// TestJobsFilterAndPaging: the filters narrow the list, the pages follow
// IDs (keyset), the ID filter opens the job, and bad input says what is
// wrong.
func TestJobsFilterAndPaging(t *testing.T) {
	d := newDash(t, dashboard.Options{})
	var ids []int64
	for i := range 120 {
		ids = append(ids, d.enqueue(queue.EnqueueParams{Kind: fmt.Sprintf("k%d", i%2), Queue: "paging"}))
	}
	d.enqueue(queue.EnqueueParams{Kind: "k0", Queue: "other", UniqueKey: "only-me"})
	jobLinks := regexp.MustCompile(`class="job-link" href="/jobs/(\d+)"`)
	idsOf := func(body string) []string {
		var out []string
		for _, m := range jobLinks.FindAllStringSubmatch(body, -1) {
			out = append(out, m[1])
		}
		return out
	}
	first := d.getOK("/jobs?queue=paging&kind=k0")
	got := idsOf(first)
	if len(got) != 50 || got[0] != fmt.Sprint(ids[118]) || got[49] != fmt.Sprint(ids[20]) {
		t.Fatalf("first page of k0: %d jobs %v", len(got), got)
	}
	older := regexp.MustCompile(`href="([^"]+)" rel="next"`).FindStringSubmatch(first)
	if older == nil || !strings.Contains(older[1], fmt.Sprintf("before=%d", ids[20])) {
		t.Fatalf("first page's older link: %v", older)
	}
	second := d.getOK(strings.TrimPrefix(strings.ReplaceAll(older[1], "&amp;", "&"), ""))
	if got := idsOf(second); len(got) != 10 || got[0] != fmt.Sprint(ids[18]) || got[9] != fmt.Sprint(ids[0]) {
		t.Fatalf("second page of k0: %v", got)
	}
	if strings.Contains(second, `rel="next"`) || !strings.Contains(second, `rel="prev"`) {
		t.Errorf("the last page should link to newer jobs only")
	}
	if got := idsOf(d.getOK("/jobs?key=only-me")); len(got) != 1 {
		t.Errorf("unique key filter found %v", got)
	}
	code, loc, _ := d.postOrGet("/jobs?id=" + fmt.Sprint(ids[5]))
	if code != http.StatusSeeOther || loc != fmt.Sprintf("/jobs/%d", ids[5]) {
		t.Errorf("ID filter = %d to %q", code, loc)
	}
	for path, want := range map[string]string{
		"/jobs?state=done":       `jobfence: unknown job state &#34;done&#34;: want one of available, scheduled, running, retryable, completed, discarded, cancelled, limited, pending`,
		"/jobs?id=abc":           `job ID &#34;abc&#34; is not a number`,
		"/jobs?before=x":         `before=&#34;x&#34; is not a job ID`,
		"/jobs/abc":              `job ID &#34;abc&#34; is not a number`,
		"/jobs?before=5&after=2": "Before and After both set",
	} {
		code, body := d.get(path)
		if code != http.StatusBadRequest || !strings.Contains(body, want) {
			t.Errorf("GET %s = %d, want 400 saying %q:\n%s", path, code, want, body)
		}
	}
}

// postOrGet is a GET that reports the redirect it gets.
func (d *dash) postOrGet(path string) (int, string, string) {
	d.t.Helper()
	resp, err := d.client.Get(d.URL + path)
	if err != nil {
		d.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Location"), readBody(d.t, resp)
}

// TestOverviewCounts: the overview's figures per queue, and the oldest
// waiting job's age.
func TestOverviewCounts(t *testing.T) {
	d := newDash(t, dashboard.Options{})
	ctx := context.Background()
	for range 3 {
		d.enqueue(queue.EnqueueParams{Kind: "a", Queue: "q1"})
	}
	d.enqueue(queue.EnqueueParams{Kind: "a", Queue: "q1", ScheduledAt: time.Now().Add(time.Hour)})
	jobs := d.claim("q1", 3)
	d.finish(jobs[0], queue.OutcomeComplete, nil)
	d.finish(jobs[1], queue.OutcomeDiscard, &queue.AttemptError{Attempt: 1, At: time.Now(), Error: "bad"})
	if _, err := d.db.Pool.Exec(ctx, `UPDATE jobfence_jobs SET scheduled_at = now() - interval '2 hours' WHERE queue = 'q1' AND state = 'scheduled'`); err != nil {
		t.Fatal(err)
	}
	body := d.getOK("/")
	row := regexp.MustCompile(`(?s)<tr data-queue="q1">.*?</tr>`).FindString(body)
	var nums []string
	for _, m := range regexp.MustCompile(`>(\d+)<`).FindAllStringSubmatch(row, -1) {
		nums = append(nums, m[1])
	}
	// available, scheduled, limited, pending, running, retryable,
	// discarded, cancelled, completed 5 min, 1 h
	if got := strings.Join(nums, " "); got != "0 1 0 0 1 0 1 0 1 1" {
		t.Errorf("q1's figures %q, want available 0, scheduled 1, limited 0, pending 0, running 1, retryable 0, discarded 1, cancelled 0, completed 1 and 1:\n%s", got, row)
	}
	if !strings.Contains(row, "2h0m0s ago") {
		t.Errorf("q1's oldest waiting job should be 2h old:\n%s", row)
	}
}

// TestSchedulesMissed: a schedule whose fires came due with no instance
// running shows how many were missed.
func TestSchedulesMissed(t *testing.T) {
	d := newDash(t, dashboard.Options{})
	next := time.Now().Truncate(time.Minute).Add(-5 * time.Minute)
	if _, err := d.db.Pool.Exec(context.Background(), `INSERT INTO jobfence_schedules (name, spec, time_zone, kind, queue, catch_up, next_fire)
		VALUES ('every-minute', '* * * * *', 'UTC', 'tick', 'default', 'all', $1), ('broken', 'not a spec', 'UTC', 'tick', 'default', 'skip', $1)`, next); err != nil {
		t.Fatal(err)
	}
	body := d.getOK("/schedules")
	// Fires at next, +1m, ... up to 10 s ago: 5 of them, or 6 when the page
	// is read in the last 10 s of a minute or the minute turns meanwhile.
	row := regexp.MustCompile(`(?s)<td>every-minute</td>.*?</tr>`).FindString(body)
	if !regexp.MustCompile(`<td class="num warn">[56]</td>`).MatchString(row) {
		t.Errorf("every-minute's missed fires:\n%s", row)
	}
	mustContain(t, "/schedules", body, "broken", `class="err"`)
}
