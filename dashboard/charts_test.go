package dashboard_test

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/dashboard"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// render and export are the workload's jobs: a render fails its first
// attempt when Flaky is set, and an export always fails.
type render struct {
	Flaky bool `json:"flaky"`
}

func (render) Kind() string { return "render" }

type export struct{}

func (export) Kind() string { return "export" }

// nowRetry retries a failed job at once.
type nowRetry struct{}

func (nowRetry) NextRetry(*queue.Job) time.Time { return time.Now() }

// workload runs a short workload on queue "reports" through a worker on
// its own pgqueue client: 12 renders, 4 of them failing once, and 2
// exports that fail twice and are discarded; so 12 completed, 8 failed, 6
// retried and 2 discarded attempts, of 20 started. It stops the worker once every job is
// final (its Stop writes the series) and checks that the counts landed in
// jobfence_stats_minute.
func (d *dash) workload() {
	d.t.Helper()
	ctx := context.Background()
	client := pgqueue.New(d.db.Pool, pgqueue.Config{})
	reg := worker.NewRegistry()
	worker.Add(reg, func(_ context.Context, j *worker.Job[render]) error {
		if j.Args.Flaky && j.Attempt == 1 {
			return errors.New("renderer busy")
		}
		return nil
	})
	worker.Add(reg, func(context.Context, *worker.Job[export]) error { return errors.New("export target unreachable") })
	w, err := worker.New(client, reg, worker.Config{Queues: map[string]int{"reports": 4}, RetryPolicy: nowRetry{},
		PollInterval: 50 * time.Millisecond, PromoteInterval: 20 * time.Millisecond})
	if err != nil {
		d.t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		d.t.Fatal(err)
	}
	var ps []queue.EnqueueParams
	for i := range 12 {
		ps = append(ps, queue.EnqueueParams{Queue: "reports", Kind: "render", Args: []byte(`{"flaky":` + map[bool]string{true: "true", false: "false"}[i%3 == 0] + `}`)})
	}
	for range 2 {
		ps = append(ps, queue.EnqueueParams{Queue: "reports", Kind: "export", MaxAttempts: 2})
	}
	if _, err := client.EnqueueMany(ctx, ps); err != nil {
		d.t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var open int
		if err := d.db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE queue = 'reports' AND state NOT IN ('completed', 'discarded')`).Scan(&open); err != nil {
			d.t.Fatal(err)
		}
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("%d jobs of the workload are not final after a minute", open)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil {
		d.t.Fatal(err)
	}
	var enq, com, fai, ret, dis, waits int64
	if err := d.db.Pool.QueryRow(ctx, `
SELECT coalesce(sum(enqueued), 0)::bigint, coalesce(sum(completed), 0)::bigint, coalesce(sum(failed), 0)::bigint,
       coalesce(sum(retried), 0)::bigint, coalesce(sum(discarded), 0)::bigint,
       coalesce(sum((SELECT sum(x) FROM unnest(wait_ms) x)), 0)::bigint
FROM jobfence_stats_minute WHERE queue = 'reports'`).Scan(&enq, &com, &fai, &ret, &dis, &waits); err != nil {
		d.t.Fatal(err)
	}
	// 14 jobs, 12+4+2*2 = 20 attempts started.
	if enq != 14 || com != 12 || fai != 8 || ret != 6 || dis != 2 || waits != 20 {
		d.t.Errorf("after the workload jobfence_stats_minute holds enqueued %d, completed %d, failed %d, retried %d, discarded %d, %d waits; "+
			"want 14, 12, 8, 6, 2, 20", enq, com, fai, ret, dis, waits)
	}
}

// history adds an hour of made-up minutes before the current one, for
// the charts to have a shape: counts of "reports" kinds render and export
// that rise and fall, waits, and depth samples.
func (d *dash) history() {
	d.t.Helper()
	if _, err := d.db.Pool.Exec(context.Background(), `
INSERT INTO jobfence_stats_minute (minute, queue, kind, enqueued, completed, failed, retried, discarded, wait_ms)
SELECT date_trunc('minute', now()) - m * interval '1 minute', 'reports', k.kind,
       k.f * (40 + 30 * sin(m / 6.0))::int, k.f * (38 + 28 * sin((m - 2) / 6.0))::int,
       (m % 7 = 0)::int * 3 * k.f, (m % 7 = 0)::int * 2 * k.f, (m % 7 = 0)::int * k.f,
       ARRAY[0, 2, 5, 10, 8, 4, 2, 1, (m % 5), (m % 11 = 0)::int * 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]::bigint[]
FROM generate_series(1, 59) m, (VALUES ('render', 2), ('export', 1)) k(kind, f)
ON CONFLICT DO NOTHING;
INSERT INTO jobfence_depth_minute (minute, queue, available, scheduled, limited)
SELECT date_trunc('minute', now()) - m * interval '1 minute', 'reports', (60 + 50 * cos(m / 8.0))::int, (m % 13), (m % 20 < 5)::int * 4
FROM generate_series(1, 59) m
ON CONFLICT DO NOTHING`); err != nil {
		d.t.Fatal(err)
	}
}

// TestCharts: the overview and a queue's page show the charts of the
// series (three inline SVG charts with axes, a legend, a line per series,
// and the figures table), filtered by queue, kind and range; an unknown
// range is refused, saying which there are; names are escaped.
func TestCharts(t *testing.T) {
	d := newDash(t, dashboard.Options{})
	d.workload()
	ctx := context.Background()
	if _, err := d.db.Pool.Exec(ctx, `
INSERT INTO jobfence_stats_minute (minute, queue, kind, completed) VALUES (date_trunc('minute', now()) - interval '3 minutes', 'mail', '<b>x</b>', 7)`); err != nil {
		t.Fatal(err)
	}
	body := d.getOK("/")
	mustContain(t, "the overview", body,
		`id="chart-jobs"`, `id="chart-depth"`, `id="chart-wait"`, `<svg viewBox="0 0 720 200" role="img" aria-labelledby="chart-jobs-title"`,
		`<path class="line s-completed" d="M56 `, `<li><span class="swatch s-failed"></span>failed</li>`,
		`<option>reports</option>`, `<option>mail</option>`, `<option>&lt;b&gt;x&lt;/b&gt;</option>`,
		`href="/?range=24h#charts"`, `class="current" aria-current="true">1h</a>`, "Jobs <span class=\"unit\">(jobs per minute)</span>")
	if strings.Contains(body, "<b>x</b>") {
		t.Error("the overview shows a kind's name as HTML")
	}
	// The newest minute with counts is the workload's (or the one before
	// it, if the minute turned since): all of the queues' counts.
	rows := figures(body)
	if len(rows) != 60 {
		t.Fatalf("the figures table has %d rows, want 60", len(rows))
	}
	found := false
	for _, r := range rows[:2] {
		if r == "14 12 8 6 2" {
			found = true
		}
	}
	if !found {
		t.Errorf("the newest figures are %q and %q, want enqueued 14, completed 12, failed 8, retried 6, discarded 2", rows[0], rows[1])
	}
	// Filtered by kind: export only.
	body = d.getOK("/?kind=export")
	rows = figures(body)
	if len(rows) < 2 || (rows[0] != "2 0 4 2 2" && rows[1] != "2 0 4 2 2") {
		t.Errorf("the export figures do not lead with enqueued 2, failed 4, retried 2, discarded 2: %q", rows[:2])
	}
	mustContain(t, "the overview by kind", body, `<option selected>export</option>`, `href="/?kind=export&amp;range=24h#charts"`)
	// A queue's page: its counts and its charts, over a day.
	body = d.getOK("/queues/reports?range=24h")
	mustContain(t, "the queue's page", body, `<h1>Queue reports</h1>`, `id="queue-counts"`, `id="chart-jobs"`,
		"(jobs per 10 minutes)", `class="current" aria-current="true">24h</a>`, `href="/queues/reports?range=1h#charts"`)
	if rows := figures(body); len(rows) != 144 {
		t.Errorf("a day in 10-minute steps has %d rows, want 144", len(rows))
	}
	if strings.Contains(body, `id="chart-queue"`) {
		t.Error("a queue's page offers to choose the queue")
	}
	// A queue without jobs still has its charts; the mail queue counted.
	mustContain(t, "mail's page", d.getOK("/queues/mail"), "This queue has no jobs now.", `id="chart-jobs"`)
	code, body := d.get("/?range=week")
	if code != http.StatusBadRequest || !strings.Contains(body, `unknown range &#34;week&#34;: the charts show 1h or 24h`) {
		t.Errorf("range=week answered %d:\n%s", code, body)
	}
	mustContain(t, "the queues page", d.getOK("/queues"), `href="/queues/reports"`)
}

// figureRowRE reads a row of the figures table under the charts.
var figureRowRE = regexp.MustCompile(`<tr><th scope="row">[^<]+</th><td class="num">(\d+)</td><td class="num">(\d+)</td><td class="num">(\d+)</td><td class="num">(\d+)</td><td class="num">(\d+)</td>`)

// figures returns the rows of the figures table, newest first, each as
// its enqueued, completed, failed, retried and discarded counts joined by
// spaces.
func figures(body string) []string {
	var out []string
	for _, m := range figureRowRE.FindAllStringSubmatch(body, -1) {
		out = append(out, strings.Join(m[1:6], " "))
	}
	return out
}
