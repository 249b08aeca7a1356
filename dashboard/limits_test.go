package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/jobfence/jobfence/dashboard"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestLimitsPage: a limit set from the page's form applies (a third job
// waits), the page shows its use and its waiting job, the waiting job's
// page says why it waits, /metrics counts it as held back, a bad limit is
// refused with its reason, and Delete releases the waiting job.
func TestLimitsPage(t *testing.T) {
	d := newDash(t, dashboard.Options{})
	ctx := context.Background()
	mustContain(t, "the empty limits page", d.getOK("/limits"), "No limit is set.", `id="limit-form"`)
	token := d.token("/limits")
	code, loc, body := d.post("/limits/set", url.Values{"csrf": {token}, "name": {"provider"}, "queue": {"calls"}, "concurrency": {"2"}})
	if code != http.StatusSeeOther || loc != "/limits?done=limit-set" {
		t.Fatalf("set: %d to %q:\n%s", code, loc, body)
	}
	c := pgqueue.New(d.db.Pool, pgqueue.Config{})
	var ids []int64
	for range 3 {
		res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "call", Queue: "calls"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ID)
	}
	if jobs, err := c.Claim(ctx, queue.ClaimParams{Queue: "calls", Limit: 10, Lease: 60e9, WorkerID: "w"}); err != nil || len(jobs) != 2 {
		t.Fatalf("claimed %d, %v; want the limit's 2", len(jobs), err)
	}
	page := d.getOK(loc)
	mustContain(t, "the page after Set", page, "The limit is set: every instance applies it at its next grant")
	row := regexp.MustCompile(`(?s)<tr data-limit="provider">.*?</tr>`).FindString(page)
	cells := regexp.MustCompile(`<td class="num[^"]*">(.*?)</td>`).FindAllStringSubmatch(row, -1)
	var got []string
	for _, m := range cells {
		got = append(got, regexp.MustCompile(`<[^>]*>`).ReplaceAllString(m[1], ""))
	}
	if want := []string{"2", "2", "-", "-", "1", "1"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("provider's row: %q, want %q (concurrency, in use, rate, started, partitions, waiting)", got, want)
	}
	mustContain(t, "the waiting job's page", d.getOK(fmt.Sprintf("/jobs/%d", ids[2])),
		`<dd id="job-waits">waits for a slot of limit &#34;provider&#34;: 2 of 2 slots held; 0 jobs of the partition ahead of it</dd>`)
	mustContain(t, "/metrics", d.getOK("/metrics"), `jobfence_queue_jobs{queue="calls",state="limited"} 1`)

	code, _, body = d.post("/limits/set", url.Values{"csrf": {token}, "name": {"bad"}, "queue": {"calls"}, "rate": {"5"}})
	if code != http.StatusBadRequest || !strings.Contains(body, "Period must be positive with a Rate") {
		t.Errorf("a rate without a period: %d:\n%s", code, body)
	}
	code, _, body = d.post("/limits/set", url.Values{"csrf": {token}, "name": {"bad"}, "queue": {"calls"}, "concurrency": {"1"},
		"fair_by": {"tenant"}, "fair_weights": {"acme"}})
	if code != http.StatusBadRequest || !strings.Contains(body, "FairWeights entry &#34;acme&#34; is not key=weight") {
		t.Errorf("a weight without its value: %d:\n%s", code, body)
	}
	code, _, body = d.post("/limits/set", url.Values{"csrf": {token}, "name": {"shared"}, "queue": {"tenants"}, "concurrency": {"4"},
		"fair_by": {"tenant"}, "fair_weights": {"globex=2, acme=3"}})
	if code != http.StatusSeeOther {
		t.Fatalf("set a fair limit: %d:\n%s", code, body)
	}
	mustContain(t, "the page with a fair limit", d.getOK("/limits"), `<td class="fair"><code>tenant</code> (acme=3,globex=2)</td>`)
	code, loc, body = d.post("/limits/delete", url.Values{"csrf": {token}, "name": {"provider"}})
	if code != http.StatusSeeOther || loc != "/limits?done=limit-deleted" {
		t.Fatalf("delete: %d to %q:\n%s", code, loc, body)
	}
	if j, err := c.Get(ctx, ids[2]); err != nil || j.State != queue.StateAvailable {
		t.Fatalf("after delete the waiting job is %v, %v; want available", j.State, err)
	}
	if code, _, _ = d.post("/limits/delete", url.Values{"csrf": {token}, "name": {"provider"}}); code != http.StatusNotFound {
		t.Errorf("deleting an unknown limit: %d, want 404", code)
	}
}
