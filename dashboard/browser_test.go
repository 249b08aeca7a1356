package dashboard_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/jobfence/jobfence/dashboard"
	"github.com/jobfence/jobfence/internal/devenv"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// screenshotsEnv names a directory to keep the browser test's screenshots
// in; by default they go to the test's temporary directory.
const screenshotsEnv = "JOBFENCE_SCREENSHOTS"

// newBrowser starts a headless Chromium for t, installing Debian's package
// when the test runs as root, and skipping the test, saying why, when it
// cannot. It collects what the page reports: console errors (a script or
// style the Content-Security-Policy blocked, for one) and dialogs.
func newBrowser(t *testing.T) (context.Context, *pageEvents) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	if err := devenv.InstallChromium(ctx); errors.Is(err, devenv.ErrNotInstalled) {
		t.Skipf("the browser test needs Chromium: %v (run make test as root, or apt-get install chromium)", err)
	} else if err != nil {
		t.Fatal(err)
	}
	bin, _ := devenv.ChromiumBinary()
	// The flags keep Chromium off the network (this machine's is closed)
	// and out of the user's profile.
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(bin),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		// No UserDataDir: chromedp makes a fresh one for this browser and
		// removes it once Chromium has exited.
		chromedp.WindowSize(1400, 1000),
	)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancelBrowser)
	ev := &pageEvents{}
	chromedp.ListenTarget(bctx, ev.listen)
	if err := chromedp.Run(bctx, chromedp.ActionFunc(func(ctx context.Context) error { return cdplog.Enable().Do(ctx) })); err != nil {
		t.Fatalf("start Chromium (%s): %v", bin, err)
	}
	return bctx, ev
}

// pageEvents records the page's errors and dialogs.
type pageEvents struct {
	mu     sync.Mutex
	errors []string
}

func (p *pageEvents) listen(ev any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch ev := ev.(type) {
	case *cdplog.EventEntryAdded:
		if ev.Entry.Level == cdplog.LevelError {
			p.errors = append(p.errors, "console: "+ev.Entry.Text+" "+ev.Entry.URL)
		}
	case *runtime.EventExceptionThrown:
		p.errors = append(p.errors, "exception: "+ev.ExceptionDetails.Text)
	case *page.EventJavascriptDialogOpening:
		// A dialog the test did not ask for: job data that ran as script.
		p.errors = append(p.errors, "dialog: "+ev.Message)
	}
}

// check fails t for each error the page reported, except those that
// contain one of expected (such as the console's line about a status the
// test asked for).
func (p *pageEvents) check(t *testing.T, expected ...string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
next:
	for _, e := range p.errors {
		for _, x := range expected {
			if strings.Contains(e, x) {
				continue next
			}
		}
		t.Errorf("the page reported %s", e)
	}
}

// screenshots returns an action that saves a screenshot of the page as
// name.png, in the directory screenshotsEnv names or else in t's
// temporary directory.
func screenshots(t *testing.T) func(name string) chromedp.Action {
	t.Helper()
	shots := os.Getenv(screenshotsEnv)
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	return func(name string) chromedp.Action {
		return chromedp.ActionFunc(func(ctx context.Context) error {
			var png []byte
			if err := chromedp.FullScreenshot(&png, 100).Do(ctx); err != nil {
				return err
			}
			path := filepath.Join(shots, name+".png")
			t.Logf("screenshot %s", path)
			return os.WriteFile(path, png, 0o644)
		})
	}
}

// TestBrowser drives the dashboard in headless Chromium as an on-call
// engineer would: open the overview (every waiting state has a column:
// limited and pending jobs too), filter the jobs down to the failed
// one, open it, click Retry, and see its state change; a screenshot of
// each step is saved.
func TestBrowser(t *testing.T) {
	ctx, events := newBrowser(t)
	d := newDash(t, dashboard.Options{})
	for range 3 {
		d.enqueue(queue.EnqueueParams{Kind: "welcome", Queue: "email"})
	}
	id := d.enqueue(queue.EnqueueParams{Kind: "charge", Queue: "billing", Args: []byte(`{"note":"<script>alert('xss')</script>","amount":1250}`), MaxAttempts: 1})
	j := d.claim("billing", 1)[0]
	d.finish(j, queue.OutcomeRetry, &queue.AttemptError{Attempt: 1, At: time.Now(), Error: "card declined <img src=x onerror=alert(1)>"})
	d.enqueue(queue.EnqueueParams{Kind: "charge", Queue: "billing"})
	// An email held back by a limit, a workflow task waiting for its
	// dependency and a cancelled email: each has a column of its own, so
	// that a queue of jobs waiting on a limit does not look idle.
	if _, err := d.db.Pool.Exec(context.Background(), `
WITH w AS (INSERT INTO jobfence_workflows (id, name) VALUES (md5('w')::uuid, 'w') RETURNING id)
INSERT INTO jobfence_jobs (queue, kind, state, scheduled_at, finalized_at, limit_name, limit_part, workflow_id, task_name, deps_left)
VALUES ('email', 'welcome', 'limited', now(), NULL, 'smtp', '', NULL, NULL, NULL),
       ('email', 'digest', 'pending', now(), NULL, NULL, NULL, (SELECT id FROM w), 'digest', 1),
       ('email', 'welcome', 'cancelled', now(), now(), NULL, NULL, NULL, NULL, NULL)`); err != nil {
		t.Fatal(err)
	}

	screenshot := screenshots(t)

	// run runs actions; navigate runs one that loads a page (a link, a
	// form) and returns once that page has loaded, so that what follows
	// reads the new page and not the one it replaces.
	run := func(step string, actions ...chromedp.Action) {
		t.Helper()
		if err := chromedp.Run(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	navigate := func(step string, action chromedp.Action) {
		t.Helper()
		resp, err := chromedp.RunResponse(ctx, action)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if resp.Status != 200 {
			t.Fatalf("%s: %s answered %d", step, resp.URL, resp.Status)
		}
	}
	var header, email, discarded, listed, stateBefore, args, stateAfter, flash string
	navigate("open the overview", chromedp.Navigate(d.URL+"/"))
	run("read the overview",
		chromedp.WaitVisible(`tr[data-queue="billing"]`),
		chromedp.Text(`table.overview thead tr`, &header),
		chromedp.Text(`tr[data-queue="email"]`, &email),
		chromedp.Text(`tr[data-queue="billing"] td:nth-of-type(7)`, &discarded),
		screenshot("1-overview"))
	navigate("open the jobs", chromedp.Click(`nav a[href="/jobs"]`))
	run("fill in the filter",
		chromedp.SetValue(`#filter-state`, "discarded"),
		chromedp.SendKeys(`#filter-queue`, "billing"))
	navigate("filter", chromedp.Click(`#filter-submit`))
	run("read the filtered jobs",
		chromedp.Text(`#jobs-table tbody`, &listed),
		screenshot("2-jobs-filtered"))
	navigate("open the job", chromedp.Click(fmt.Sprintf(`a.job-link[href="/jobs/%d"]`, id)))
	run("read the job",
		chromedp.Text(`#job-state`, &stateBefore),
		chromedp.Text(`#job-args`, &args),
		screenshot("3-job"))
	navigate("retry", chromedp.Click(`#retry`))
	run("read the retried job",
		chromedp.Text(`#job-state`, &stateAfter),
		chromedp.Text(`p.flash`, &flash),
		screenshot("4-job-retried"))
	if got, want := strings.Join(strings.Fields(header), " "),
		"Queue Available Scheduled Limited Pending Running Retryable Discarded Cancelled Completed 5 min Completed 1 h Oldest waiting Paused"; got != want {
		t.Errorf("the overview's columns are %q, want %q", got, want)
	}
	// email: 3 available, 1 limited, 1 pending, 1 cancelled, none
	// completed; then the oldest waiting job's age and "no" (not paused).
	if got, want := strings.Fields(email), []string{"email", "3", "0", "1", "1", "0", "0", "0", "1", "0", "0"}; len(got) < len(want) ||
		!slices.Equal(got[:len(want)], want) || got[len(got)-1] != "no" {
		t.Errorf("the overview's email row reads %q, want %q, an age and no", got, want)
	}
	if strings.TrimSpace(discarded) != "1" {
		t.Errorf("the overview shows %q discarded jobs in billing, want 1", discarded)
	}
	if !strings.Contains(listed, fmt.Sprint(id)) || strings.Count(listed, "charge") != 1 || strings.Contains(listed, "welcome") {
		t.Errorf("the filtered list is not the one discarded billing job:\n%s", listed)
	}
	if stateBefore != "discarded" || stateAfter != "available" || flash != "The job will run again now." {
		t.Errorf("state %q, then %q after Retry with %q; want discarded, then available", stateBefore, stateAfter, flash)
	}
	if !strings.Contains(args, `"note": "<script>alert('xss')</script>"`) {
		t.Errorf("the job's arguments do not read as text:\n%s", args)
	}
	if st := d.state(id); st != queue.StateAvailable {
		t.Errorf("in the database the job is %s, want available", st)
	}

	// The queue page's fleet form: set email's concurrency for the fleet.
	var fleetFlash, fleetCell string
	navigate("open the queues", chromedp.Click(`nav a[href="/queues"]`))
	run("type a concurrency", chromedp.SendKeys(`tr[data-queue="email"] input[name="concurrency"]`, "3"))
	navigate("set it for the fleet", chromedp.Click(`tr[data-queue="email"] button.fleet-set`))
	run("read the queues",
		chromedp.Text(`p.flash`, &fleetFlash),
		chromedp.Text(`tr[data-queue="email"] td.fleet`, &fleetCell),
		screenshot("14-queue-fleet-set"))
	if fleetFlash != "The queue's concurrency is set: every worker that works it follows within about a second; running jobs go on." ||
		strings.TrimSpace(fleetCell) != "set to 3" {
		t.Errorf("after Set: flash %q, fleet cell %q; want the set flash and \"set to 3\"", fleetFlash, fleetCell)
	}
	if qs, err := d.q.Queues(context.Background()); err != nil || len(qs) < 2 || qs[1].Name != "email" || qs[1].Concurrency != 3 {
		t.Errorf("stored after Set: %+v, %v; want email at 3", qs, err)
	}
	// The charts over time, from a short workload with failures and
	// retries run by a worker (the current minute) after an hour of
	// made-up minutes: on the overview, then on the queue's own page,
	// reached from the queues page and switched to a day by keyboard.
	d.workload()
	d.history()
	var jobsPath, newest, figures, tooltip string
	navigate("open the overview with charts", chromedp.Navigate(d.URL+"/"))
	run("read the charts",
		chromedp.WaitVisible(`#chart-jobs svg`),
		chromedp.AttributeValue(`#chart-jobs path.s-completed`, "d", &jobsPath, nil),
		chromedp.Text(`#chart-wait figcaption`, &tooltip),
		chromedp.ScrollIntoView(`#charts`),
		screenshot("12-overview-charts"))
	navigate("open the queues", chromedp.Click(`nav a[href="/queues"]`))
	navigate("open the queue's charts", chromedp.Click(`a.queue-charts[href="/queues/reports"]`))
	run("focus the day's range", chromedp.Focus(`#chart-ranges a[href^="/queues/reports?range=24h"]`))
	navigate("switch to a day by keyboard", chromedp.KeyEvent("\r"))
	run("read the queue's charts",
		chromedp.WaitVisible(`#chart-depth svg`),
		chromedp.Text(`#chart-ranges a.current`, &figures),
		screenshot("13-queue-charts"),
		chromedp.Click(`#chart-figures summary`),
		chromedp.Text(`#chart-figures tbody tr:first-child`, &newest))
	if n := strings.Count(jobsPath, " L"); n != 59 {
		t.Errorf("the completed line has %d segments, want 59 (an hour by the minute): %q", n, jobsPath)
	}
	if !strings.Contains(tooltip, "Enqueue to start") {
		t.Errorf("the wait chart is captioned %q", tooltip)
	}
	if figures != "24h" {
		t.Errorf("the queue's page shows the range %q after the keyboard chose 24h", figures)
	}
	// The newest 10 minutes hold the workload (and some made-up minutes):
	// at least its 14 enqueued and 12 completed jobs.
	if f := strings.Fields(newest); len(f) < 8 || f[2] == "0" || f[3] == "0" {
		t.Errorf("the queue's newest figures read %q, want the workload's counts", newest)
	}
	events.check(t)
}

// TestBrowserInsertJob inserts a job from the jobs page in headless
// Chromium: JSON with a trailing comma is refused, saying where, and the
// corrected form inserts the job scheduled at the time picked in the
// form's date-time input.
func TestBrowserInsertJob(t *testing.T) {
	ctx, events := newBrowser(t)
	d := newDash(t, dashboard.Options{})
	screenshot := screenshots(t)
	run := func(step string, actions ...chromedp.Action) {
		t.Helper()
		if err := chromedp.Run(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	navigate := func(step string, action chromedp.Action, status int64) {
		t.Helper()
		resp, err := chromedp.RunResponse(ctx, action)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if resp.Status != status {
			t.Fatalf("%s: %s answered %d, want %d", step, resp.URL, resp.Status, status)
		}
	}
	var refusal, state, args, flash string
	navigate("open the jobs", chromedp.Navigate(d.URL+"/jobs?queue=billing&kind=charge"), 200)
	navigate("open the insert form", chromedp.Click(`#insert-link`), 200)
	run("fill in JSON with a trailing comma",
		chromedp.SetValue(`#insert-args`, "{\"amount\": 1250,}"),
		screenshot("5-insert-form"))
	navigate("insert", chromedp.Click(`#insert-submit`), 400)
	run("read the refusal", chromedp.Text(`#error-message`, &refusal), screenshot("6-insert-refused"))

	navigate("open the insert form again", chromedp.Navigate(d.URL+"/jobs/new?queue=billing&kind=charge"), 200)
	run("fill in the form",
		chromedp.SetValue(`#insert-args`, `{"amount": 1250, "note": "<script>alert('xss')</script>"}`),
		chromedp.SetValue(`#insert-priority`, "3"),
		chromedp.SetValue(`#insert-scheduled-at`, "2030-01-02T03:04:05"),
		chromedp.SetValue(`#insert-max-attempts`, "5"))
	navigate("insert", chromedp.Click(`#insert-submit`), 200)
	run("read the inserted job",
		chromedp.Text(`#job-state`, &state),
		chromedp.Text(`#job-args`, &args),
		chromedp.Text(`p.flash`, &flash),
		screenshot("7-inserted"))

	if !strings.Contains(refusal, "args: not valid JSON at line 1, column 17") {
		t.Errorf("the refusal of a trailing comma says %q", refusal)
	}
	if state != "scheduled" || flash != "The job is inserted." || !strings.Contains(args, `"note": "<script>alert('xss')</script>"`) {
		t.Errorf("after the insert: state %q, flash %q, args:\n%s", state, flash, args)
	}
	jobs, err := d.q.List(context.Background(), pgqueue.ListParams{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 {
		t.Fatalf("%d jobs, want the one inserted", len(jobs))
	}
	j := jobs[0]
	if want := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC); j.Queue != "billing" || j.Kind != "charge" || j.Priority != 3 || j.MaxAttempts != 5 || !j.ScheduledAt.Equal(want) {
		t.Errorf("inserted %+v; want billing/charge, priority 3, 5 attempts, scheduled at %s", j, want)
	}
	events.check(t, "the server responded with a status of 400 (Bad Request) "+d.URL+"/jobs")
}

// TestBrowserJobProgress opens, in headless Chromium, the page of a
// running job whose handler reported progress: the page shows it, as
// text (markup in it does not run), and still shows it once the job
// completed, with the logs its attempt stored (worker.Logger), as text,
// under the attempt, with the count of records dropped. A job stored
// encrypted shows, on its page and in the jobs list, "encrypted (key k1)"
// and nothing of its args, to a dashboard without the key.
func TestBrowserJobProgress(t *testing.T) {
	ctx, events := newBrowser(t)
	d := newDash(t, dashboard.Options{})
	screenshot := screenshots(t)
	secret := d.enqueueEncrypted(`{"card":"4111-1111"}`)
	var secretArgs, secretRow string
	if resp, err := chromedp.RunResponse(ctx, chromedp.Navigate(fmt.Sprintf("%s/jobs/%d", d.URL, secret))); err != nil || resp.Status != 200 {
		t.Fatalf("open the encrypted job: %v, %v", resp, err)
	}
	if err := chromedp.Run(ctx, chromedp.Text(`#job-args`, &secretArgs), screenshot("8-job-encrypted")); err != nil {
		t.Fatal(err)
	}
	if resp, err := chromedp.RunResponse(ctx, chromedp.Navigate(d.URL+"/jobs?kind=pay")); err != nil || resp.Status != 200 {
		t.Fatalf("list the encrypted job: %v, %v", resp, err)
	}
	if err := chromedp.Run(ctx, chromedp.Text(`#jobs-table tbody`, &secretRow)); err != nil {
		t.Fatal(err)
	}
	if secretArgs != "encrypted (key k1)" || !strings.Contains(secretRow, "encrypted (key k1)") || strings.Contains(secretRow+secretArgs, "4111") {
		t.Errorf("the encrypted job shows args %q, its row %q; want encrypted (key k1) and no plaintext", secretArgs, secretRow)
	}
	id := d.enqueue(queue.EnqueueParams{Kind: "import", Queue: "imports"})
	j := d.claim("imports", 1)[0]
	if err := d.q.RecordProgress(context.Background(), j.Lease(), []byte(`{"rows":1200,"of":5000,"file":"<img src=x onerror=alert(1)>"}`)); err != nil {
		t.Fatal(err)
	}
	logs := queue.AttemptLogs{Attempt: j.Attempt, Dropped: 42, Records: []queue.LogRecord{
		{At: time.Date(2030, 1, 2, 3, 4, 5, 6e6, time.UTC), Level: "INFO", Message: "reading <img src=x onerror=alert(2)>", Attrs: "rows=1200"},
		{At: time.Date(2030, 1, 2, 3, 4, 6, 0, time.UTC), Level: "WARN", Message: "slow disk"},
	}}
	if _, err := d.q.RecordLogs(context.Background(), []queue.LogsWrite{{Lease: j.Lease(), Logs: logs}}, 10); err != nil {
		t.Fatal(err)
	}
	read := func(step, name string) (state, progress string) {
		t.Helper()
		resp, err := chromedp.RunResponse(ctx, chromedp.Navigate(fmt.Sprintf("%s/jobs/%d", d.URL, id)))
		if err != nil || resp.Status != 200 {
			t.Fatalf("%s: %v, %v", step, resp, err)
		}
		if err := chromedp.Run(ctx,
			chromedp.Text(`#job-state`, &state),
			chromedp.Text(`#job-progress`, &progress),
			screenshot(name)); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		return state, progress
	}
	const want = `{"of": 5000, "file": "<img src=x onerror=alert(1)>", "rows": 1200}`
	if state, progress := read("open the running job", "8-job-progress-running"); state != "running" || progress != want {
		t.Errorf("the running job's page: state %q, progress %q; want running, %q", state, progress, want)
	}
	d.finish(j, queue.OutcomeComplete, nil)
	if state, progress := read("open the completed job", "9-job-progress-completed"); state != "completed" || progress != want {
		t.Errorf("the completed job's page: state %q, progress %q; want completed, %q", state, progress, want)
	}
	var records, dropped string
	if err := chromedp.Run(ctx, chromedp.Text(`#attempt-1 pre.logs`, &records), chromedp.Text(`#attempt-1 .dropped`, &dropped)); err != nil {
		t.Fatalf("read the attempt's logs: %v", err)
	}
	if want := "03:04:05.006 INFO reading <img src=x onerror=alert(2)> rows=1200\n03:04:06.000 WARN slow disk"; strings.TrimSpace(records) != want ||
		!strings.HasPrefix(dropped, "42 earlier records dropped") {
		t.Errorf("the attempt's logs %q, %q; want %q and 42 dropped", records, dropped, want)
	}
	events.check(t)
}

// TestBrowserSearchJobs searches the jobs page in headless Chromium: by
// args (a JSON object typed in the search box, markup in it shown as
// text), then by a tag of the job found (its link), opens the job, whose
// page shows its tags, and retries it (the form's CSRF token still
// holds); args that are not an object are refused, saying so.
func TestBrowserSearchJobs(t *testing.T) {
	ctx, events := newBrowser(t)
	d := newDash(t, dashboard.Options{})
	for i := range 5 {
		d.enqueue(queue.EnqueueParams{Kind: "charge", Queue: "billing", Args: fmt.Appendf(nil, `{"customer":"c%d"}`, i)})
	}
	id := d.enqueue(queue.EnqueueParams{Kind: "charge", Queue: "billing", Args: []byte(`{"customer":"<b>c1</b>","amount":3}`),
		Tags: []string{"vip", "region:eu"}})
	other := d.enqueue(queue.EnqueueParams{Kind: "welcome", Queue: "email", Tags: []string{"vip"}})
	screenshot := screenshots(t)
	run := func(step string, actions ...chromedp.Action) {
		t.Helper()
		if err := chromedp.Run(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	navigate := func(step string, action chromedp.Action, status int64) {
		t.Helper()
		resp, err := chromedp.RunResponse(ctx, action)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if resp.Status != status {
			t.Fatalf("%s: %s answered %d, want %d", step, resp.URL, resp.Status, status)
		}
	}
	var found, box, tagged, tags, flash, refusal string
	var bulk []*cdp.Node
	navigate("open the jobs", chromedp.Navigate(d.URL+"/jobs"), 200)
	run("type the args", chromedp.SendKeys(`#filter-args`, `{"customer":"<b>c1</b>"}`))
	navigate("search", chromedp.Click(`#filter-submit`), 200)
	run("read the jobs found",
		chromedp.Text(`#jobs-table tbody`, &found),
		chromedp.Value(`#filter-args`, &box),
		chromedp.Nodes(`section.bulk`, &bulk, chromedp.AtLeast(0)),
		screenshot("10-jobs-search-args"))
	navigate("follow the tag", chromedp.Click(`#jobs-table a.tag[href="/jobs?tag=vip"]`), 200)
	run("read the tagged jobs", chromedp.Text(`#jobs-table tbody`, &tagged))
	navigate("open the job", chromedp.Click(fmt.Sprintf(`a.job-link[href="/jobs/%d"]`, id)), 200)
	run("read the job's tags", chromedp.Text(`#job-tags`, &tags), screenshot("11-job-tags"))
	navigate("retry", chromedp.Click(`#retry`), 200)
	run("read the flash", chromedp.Text(`p.flash`, &flash))
	navigate("search with an array", chromedp.Navigate(d.URL+"/jobs?args="+url.QueryEscape(`["c1"]`)), 400)
	run("read the refusal", chromedp.Text(`#error-message`, &refusal))

	if rows := strings.Count(strings.TrimSpace(found), "\n") + 1; !strings.Contains(found, fmt.Sprint(id)) || rows != 1 ||
		!strings.Contains(found, "<b>c1</b>") || !strings.Contains(found, "vip") {
		t.Errorf("the args search found, as text:\n%s\nwant job %d alone, its args and tags shown as text", found, id)
	}
	if box != `{"customer":"<b>c1</b>"}` || len(bulk) != 0 {
		t.Errorf("after the search the box holds %q and %d bulk sections; want the text typed and none", box, len(bulk))
	}
	if !strings.Contains(tagged, fmt.Sprint(id)) || !strings.Contains(tagged, fmt.Sprint(other)) || strings.Count(tagged, "charge") != 1 {
		t.Errorf("the tag vip lists:\n%s\nwant jobs %d and %d only", tagged, id, other)
	}
	if strings.Join(strings.Fields(tags), " ") != "vip region:eu" || flash != "The job will run again now." {
		t.Errorf("the job's tags read %q, the retry %q", tags, flash)
	}
	if !strings.Contains(refusal, "is not a JSON object") {
		t.Errorf("args that are not an object: %q", refusal)
	}
	events.check(t, "status of 400 (Bad Request) "+d.URL+"/jobs?args=")
}

// TestBrowserWorkflowLineage opens, in headless Chromium, a workflow whose
// task started a child workflow: its page links to the child, the child's
// page to its parent job, and the parent job's page to the child.
func TestBrowserWorkflowLineage(t *testing.T) {
	ctx, events := newBrowser(t)
	d := newDash(t, dashboard.Options{})
	screenshot := screenshots(t)
	bg := context.Background()
	outer, err := d.q.InsertWorkflow(bg, queue.WorkflowParams{Name: "signup 7", Tasks: []queue.WorkflowTask{
		{Name: "provision", Params: queue.EnqueueParams{Kind: "provision", Queue: "signups"}}}})
	if err != nil {
		t.Fatal(err)
	}
	parent := d.claim("signups", 1)[0]
	const childID = "0d9c2f4e-8a6b-4c1d-9e2f-3a4b5c6d7e8f"
	if _, err := d.q.InsertWorkflow(bg, queue.WorkflowParams{ID: childID, Name: "tenant 7", Parent: parent.Lease(),
		Tasks: []queue.WorkflowTask{{Name: "db", Params: queue.EnqueueParams{Kind: "db", Queue: "tenants"}}}}); err != nil {
		t.Fatal(err)
	}
	open := func(step, path, sel, name string) (text, href string) {
		t.Helper()
		resp, err := chromedp.RunResponse(ctx, chromedp.Navigate(d.URL+path))
		if err != nil || resp.Status != 200 {
			t.Fatalf("%s: %v, %v", step, resp, err)
		}
		var ok bool
		if err := chromedp.Run(ctx, chromedp.Text(sel, &text), chromedp.AttributeValue(sel+" a", "href", &href, &ok), screenshot(name)); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		return text, href
	}
	text, href := open("open the parent's workflow", "/workflows/"+outer.ID, "#workflow-children", "10-workflow-children")
	if want := fmt.Sprintf("tenant 7 (by job %d)", parent.ID); text != want || href != "/workflows/"+childID {
		t.Errorf("the parent's workflow shows children %q linking %q; want %q linking to the child", text, href, want)
	}
	text, href = open("open the child workflow", href, "#workflow-parent", "11-workflow-parent")
	if want := fmt.Sprintf("started by job %d", parent.ID); text != want || href != fmt.Sprintf("/jobs/%d", parent.ID) {
		t.Errorf("the child workflow shows parent %q linking %q; want %q", text, href, want)
	}
	text, href = open("open the parent job", href, "#job-children", "12-job-children")
	if text != "tenant 7" || href != "/workflows/"+childID {
		t.Errorf("the parent job shows children %q linking %q; want tenant 7 linking to the child", text, href)
	}
	events.check(t)
}
