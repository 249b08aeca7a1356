package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

func TestJobsCommand(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{})
	res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "invoice", Args: []byte(`{"id":7}`), Queue: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprint(res.ID)
	jobfence := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		code := run(ctx, append([]string{"jobs", "--database-url", db.URL}, args...), &out, &errb)
		return out.String(), errb.String(), code
	}
	steps := []struct {
		args     []string
		wantCode int
		want     string
	}{
		{[]string{"list"}, 0, "billing  invoice  available"},
		{[]string{"list", "--state", "completed"}, 0, "ID  QUEUE"},
		{[]string{"show", id}, 0, `args {"id": 7}`},
		{[]string{"cancel", id}, 0, "job " + id + " cancelled"},
		{[]string{"cancel", id}, 1, "it is already cancelled"},
		{[]string{"show", id}, 0, "attempt 0 at"},
		{[]string{"retry", id}, 0, "will run again now"},
		{[]string{"show", "999999"}, 1, "jobfence: job not found"},
		{[]string{"show", "x"}, 1, `job ID "x" is not a number`},
		{[]string{"frobnicate", id}, 1, `unknown jobs action "frobnicate"`},
	}
	for _, s := range steps {
		out, errOut, code := jobfence(s.args...)
		if code != s.wantCode || !strings.Contains(out+errOut, s.want) {
			t.Fatalf("jobfence jobs %v: exit %d, out %q, err %q; want exit %d containing %q", s.args, code, out, errOut, s.wantCode, s.want)
		}
	}
	j, err := c.Get(ctx, res.ID)
	if err != nil || j.State != queue.StateAvailable || j.ScheduledAt.After(time.Now()) {
		t.Fatalf("after retry: %+v %v", j, err)
	}
}

// TestJobsShowOutput: `jobs show` prints the output the accepted
// completion stored, as text and in --json.
func TestJobsShowOutput(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{})
	res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "charge"})
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := c.Claim(ctx, queue.ClaimParams{Queue: "default", Limit: 1, Lease: time.Minute})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %v, %v", jobs, err)
	}
	if stale, err := c.Finish(ctx, []queue.Finish{{Lease: jobs[0].Lease(), Outcome: queue.OutcomeComplete, Output: []byte(`{"charge_id":"ch_1"}`)}}); err != nil || len(stale) > 0 {
		t.Fatalf("finish: %v, %v", stale, err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"show", fmt.Sprint(res.ID)}, `  output {"charge_id": "ch_1"}`},
		{[]string{"show", "--json", fmt.Sprint(res.ID)}, `"output": {`},
	} {
		var out, errb bytes.Buffer
		if code := run(ctx, append([]string{"jobs", "--database-url", db.URL}, tt.args...), &out, &errb); code != 0 || !strings.Contains(out.String(), tt.want) {
			t.Fatalf("jobs %v: exit %d, out %q, err %q; want %q", tt.args, code, out.String(), errb.String(), tt.want)
		}
	}
}

// TestJobsShowProgress: `jobs show` prints the progress a running job's
// handler reported, as text and in --json, and still after it completed,
// with the logs its attempt stored (jobfence.Logger).
func TestJobsShowProgress(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{})
	res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "import"})
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := c.Claim(ctx, queue.ClaimParams{Queue: "default", Limit: 1, Lease: time.Minute})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %v, %v", jobs, err)
	}
	show := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(ctx, append([]string{"jobs", "--database-url", db.URL, "show"}, append(args, fmt.Sprint(res.ID))...), &out, &errb); code != 0 {
			t.Fatalf("jobs show %v: exit %d, err %q", args, code, errb.String())
		}
		return out.String()
	}
	if out := show(); strings.Contains(out, "progress") {
		t.Fatalf("jobs show of a job without progress prints %q", out)
	}
	if err := c.RecordProgress(ctx, jobs[0].Lease(), []byte(`{"rows":1200,"of":5000}`)); err != nil {
		t.Fatal(err)
	}
	if out, want := show(), "  state running, attempt 1 of 25, fence"; !strings.Contains(out, want) || !strings.Contains(out, `  progress {"of": 5000, "rows": 1200}`+"\n") {
		t.Fatalf("jobs show while running prints %q, want %q and the progress", out, want)
	}
	if out := show("--json"); !strings.Contains(out, `"progress": {`) || !strings.Contains(out, `"rows": 1200`) {
		t.Fatalf("jobs show --json prints %q, want the progress", out)
	}
	logs := queue.AttemptLogs{Attempt: 1, Dropped: 2, Records: []queue.LogRecord{
		{At: time.Date(2030, 1, 2, 3, 4, 5, 6e6, time.UTC), Level: "INFO", Message: "imported", Attrs: "rows=1200"}}}
	if _, err := c.RecordLogs(ctx, []queue.LogsWrite{{Lease: jobs[0].Lease(), Logs: logs}}, 10); err != nil {
		t.Fatal(err)
	}
	if stale, err := c.Finish(ctx, []queue.Finish{{Lease: jobs[0].Lease(), Outcome: queue.OutcomeComplete}}); err != nil || len(stale) > 0 {
		t.Fatalf("finish: %v, %v", stale, err)
	}
	want := fmt.Sprintf("  logs of attempt 1 (fence %d, 2 earlier records dropped):\n    2030-01-02T03:04:05.006Z INFO imported rows=1200\n", jobs[0].Fence)
	if out := show(); !strings.Contains(out, "state completed") || !strings.Contains(out, `  progress {"of": 5000, "rows": 1200}`) || !strings.Contains(out, want) {
		t.Fatalf("jobs show after completion prints %q, want the progress and %q", out, want)
	}
	if out := show("--json"); !strings.Contains(out, `"logs": [`) || !strings.Contains(out, `"msg": "imported"`) || !strings.Contains(out, `"dropped": 2`) {
		t.Fatalf("jobs show --json prints %q, want the logs", out)
	}
}

// TestJobsOfTheFinishedTable: a job completed once the finished-jobs
// partitions exist lives in jobfence_jobs_finished; `jobs show` and `jobs
// list` find it there, `jobs retry` refuses it, and `jobs retry --force`
// moves it back into the jobs table, ready.
func TestJobsOfTheFinishedTable(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{})
	if _, err := c.MaintainFinished(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "invoice", Args: []byte(`{"id":8}`), Queue: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := c.Claim(ctx, queue.ClaimParams{Queue: "billing", Limit: 1, Lease: time.Minute, WorkerID: "w"})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("claim: %v %v", jobs, err)
	}
	if _, err := c.Finish(ctx, []queue.Finish{{Lease: jobs[0].Lease(), Outcome: queue.OutcomeComplete, Output: []byte(`{"sent":true}`)}}); err != nil {
		t.Fatal(err)
	}
	var moved int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs_finished WHERE id = $1`, res.ID).Scan(&moved); err != nil || moved != 1 {
		t.Fatalf("the completed job is not in the finished table: %d, %v", moved, err)
	}
	id := fmt.Sprint(res.ID)
	for _, s := range []struct {
		args     []string
		wantCode int
		want     string
	}{
		{[]string{"show", id}, 0, "state completed"},
		{[]string{"show", id}, 0, `output {"sent": true}`},
		{[]string{"list", "--state", "completed"}, 0, "billing  invoice  completed"},
		{[]string{"retry", id}, 1, "pass --force to run it again anyway"},
		{[]string{"retry", "--force", id}, 0, "running it again now"},
		{[]string{"show", id}, 0, "state available"},
	} {
		var out, errb bytes.Buffer
		code := run(ctx, append([]string{"jobs", "--database-url", db.URL}, s.args...), &out, &errb)
		if code != s.wantCode || !strings.Contains(out.String()+errb.String(), s.want) {
			t.Fatalf("jobfence jobs %v: exit %d, out %q, err %q; want exit %d containing %q", s.args, code, out.String(), errb.String(), s.wantCode, s.want)
		}
	}
}

// TestJobsListSearch: `jobs list` filters by tag and by args containment,
// shows the tags (and `show` too), refuses args that are not a JSON
// object, and a search that reads its --scan bound without filling the
// page prints what it found and says how to go on.
func TestJobsListSearch(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{})
	var ps []queue.EnqueueParams
	for i := range 30 {
		ps = append(ps, queue.EnqueueParams{Kind: "invoice", Args: fmt.Appendf(nil, `{"customer":"c%d"}`, i)})
	}
	if _, err := c.EnqueueMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	tagged, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "invoice", Args: []byte(`{"customer":"c7","total":3}`),
		Tags: []string{"vip", "region:eu"}})
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprint(tagged.ID)
	jobfence := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		code := run(ctx, append([]string{"jobs", "--database-url", db.URL}, args...), &out, &errb)
		return out.String(), errb.String(), code
	}
	out, errOut, code := jobfence("list", "--tag", "vip")
	if code != 0 || !strings.Contains(out, id+" ") || !strings.Contains(out, "vip,region:eu") || strings.Count(out, "\n") != 2 {
		t.Fatalf("list --tag vip: exit %d, %q %q; want the tagged job alone, its tags shown", code, out, errOut)
	}
	out, _, code = jobfence("list", "--args", `{"customer":"c7"}`)
	if code != 0 || strings.Count(out, "\n") != 3 {
		t.Fatalf("list --args: exit %d, %q; want the two jobs of customer c7", code, out)
	}
	out, _, code = jobfence("list", "--args", `{"customer":"c7"}`, "--tag", "vip", "--json")
	if code != 0 || !strings.Contains(out, `"tags": [`) || strings.Count(out, `"id"`) != 1 {
		t.Fatalf("list --args --tag --json: exit %d, %q", code, out)
	}
	out, _, code = jobfence("show", id)
	if code != 0 || !strings.Contains(out, "tags vip, region:eu") {
		t.Fatalf("show: exit %d, %q", code, out)
	}
	_, errOut, code = jobfence("list", "--args", `["c7"]`)
	if code != 1 || !strings.Contains(errOut, "is not a JSON object") {
		t.Fatalf("list --args '[...]': exit %d, %q", code, errOut)
	}
	// The newest 10 jobs hold none of customer c3's.
	out, errOut, code = jobfence("list", "--args", `{"customer":"c3"}`, "--scan", "10")
	if code != 1 || strings.Count(out, "\n") != 1 || !strings.Contains(errOut, "search too wide: read 10 jobs") ||
		!strings.Contains(errOut, "narrow it") {
		t.Fatalf("a search past its bound: exit %d, %q %q", code, out, errOut)
	}
	_, errOut, code = jobfence("list", "--created-after", "yesterday")
	if code != 1 || !strings.Contains(errOut, "--created-after") {
		t.Fatalf("list --created-after yesterday: exit %d, %q", code, errOut)
	}
	out, _, code = jobfence("list", "--created-after", "1h", "--args", `{"customer":"c29"}`)
	if code != 0 || strings.Count(out, "\n") != 2 {
		t.Fatalf("list --created-after 1h: exit %d, %q", code, out)
	}
}
