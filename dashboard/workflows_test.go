package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/jobfence/jobfence/dashboard"
	"github.com/jobfence/jobfence/queue"
)

// TestWorkflowPages: /workflows lists a workflow with its progress;
// /workflows/{id} draws its tasks as an SVG graph and lists their states,
// outputs and reasons; Resume and Cancel act on it; the job page of a
// task shows its output and links to its workflow.
func TestWorkflowPages(t *testing.T) {
	d := newDash(t, dashboard.Options{})
	ctx := context.Background()
	task := func(name string, deps ...string) queue.WorkflowTask {
		return queue.WorkflowTask{Name: name, Params: queue.EnqueueParams{Kind: name, Queue: "orders"}, DependsOn: deps}
	}
	res, err := d.q.InsertWorkflow(ctx, queue.WorkflowParams{Name: "order 9", Tasks: []queue.WorkflowTask{
		task("charge"), task("reserve", "charge"), task("receipt", "charge"), task("ship", "reserve", "receipt"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	charge := d.claim("orders", 1)[0]
	if _, err := d.q.Finish(ctx, []queue.Finish{{Lease: charge.Lease(), Outcome: queue.OutcomeComplete, Workflow: true, Output: []byte(`{"charge_id":"ch_9"}`)}}); err != nil {
		t.Fatal(err)
	}
	reserve := d.claim("orders", 1)[0]
	if _, err := d.q.Finish(ctx, []queue.Finish{{Lease: reserve.Lease(), Outcome: queue.OutcomeDiscard, Workflow: true,
		Error: &queue.AttemptError{Attempt: 1, Error: "out of stock"}}}); err != nil {
		t.Fatal(err)
	}
	// A range of charge's dependents left to release, as a completing
	// client that stopped leaves one.
	if _, err := d.db.Pool.Exec(ctx, `INSERT INTO jobfence_releases (task_id, first, last) VALUES ($1, 3, 3)`, res.Tasks["charge"]); err != nil {
		t.Fatal(err)
	}
	mustContain(t, "GET /workflows", d.getOK("/workflows"),
		fmt.Sprintf(`<a href="/workflows/%s"><code>%s</code></a>`, res.ID, res.ID), "order 9", "available 1, completed 1, discarded 1, cancelled 1")
	page := "/workflows/" + res.ID
	mustContain(t, "GET "+page, d.getOK(page),
		`<svg class="workflow-graph" id="workflow-graph"`, `<line class="edge" x1="160" y1="28" x2="220" y2="28"/>`,
		fmt.Sprintf(`<a href="/jobs/%d"><g class="task task-completed">`, res.Tasks["charge"]), ">charge</text>",
		`<code>{&#34;charge_id&#34;: &#34;ch_9&#34;}</code>`, "out of stock",
		`jobfence: dependency failed: task &#34;reserve&#34; was discarded; cancelled`, `id="retry"`, `id="cancel"`,
		`<dd id="workflow-releases">ranges of dependents: 1 (`)
	mustContain(t, "GET job page", d.getOK(fmt.Sprintf("/jobs/%d", res.Tasks["charge"])),
		`<pre class="args" id="job-output">{
  &#34;charge_id&#34;: &#34;ch_9&#34;
}</pre>`, fmt.Sprintf(`<a href="/workflows/%s">%s</a>, task <code>charge</code>`, res.ID, res.ID))

	token := d.token(page)
	if code, to, body := d.post(page+"/retry", url.Values{"csrf": {token}}); code != http.StatusSeeOther || to != page+"?done=resumed" {
		t.Fatalf("resume: %d to %q: %s", code, to, body)
	}
	mustContain(t, "GET after resume", d.getOK(page), `<span class="state state-pending">pending</span> (2 left)`)
	if code, to, body := d.post(page+"/cancel", url.Values{"csrf": {token}}); code != http.StatusSeeOther || to != page+"?done=cancelled" {
		t.Fatalf("cancel: %d to %q: %s", code, to, body)
	}
	if s := d.state(res.Tasks["ship"]); s != queue.StateCancelled {
		t.Fatalf("ship is %s after cancel", s)
	}
	if code, body := d.get("/workflows/00000000-0000-0000-0000-000000000000"); code != http.StatusNotFound {
		t.Fatalf("unknown workflow: %d\n%s", code, body)
	}
}
