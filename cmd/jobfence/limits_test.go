package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestLimitsCLI: set stores a limit that applies at once, list shows its
// use and its waiting jobs, jobs show says why a job waits, bad input is
// refused with the reason, and delete releases the waiting jobs.
func TestLimitsCLI(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{})
	if out, errs, code := cli(t, "limits", "list", "--database-url", db.URL); code != 0 || !strings.HasPrefix(out, "no limits") {
		t.Fatalf("empty: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	out, errs, code := cli(t, "limits", "set", "provider", "--queue", "calls", "--concurrency", "2", "--partition-by", "region", "--database-url", db.URL)
	if code != 0 || out != "limit provider set; every instance applies it at its next grant\n" {
		t.Fatalf("set: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	var ids []int64
	for range 3 {
		res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "call", Queue: "calls", Args: []byte(`{"region": "eu"}`)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ID)
	}
	if jobs, err := c.Claim(ctx, queue.ClaimParams{Queue: "calls", Limit: 10, Lease: 60e9, WorkerID: "w"}); err != nil || len(jobs) != 2 {
		t.Fatalf("claimed %d, %v; want the limit's 2", len(jobs), err)
	}
	out, errs, code = cli(t, "limits", "list", "--database-url", db.URL)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(lines) != 2 {
		t.Fatalf("list: exit %d, stderr %q, stdout:\n%s", code, errs, out)
	}
	if got, want := words(lines[1]), "provider calls - region 2 2 - - release - 1 1"; got != want {
		t.Errorf("list row %q, want %q", got, want)
	}
	out, _, code = cli(t, "limits", "list", "--json", "--database-url", db.URL)
	var js []map[string]any
	if err := json.Unmarshal([]byte(out), &js); code != 0 || err != nil || len(js) != 1 || js[0]["waiting"] != float64(1) || js[0]["in_use"] != float64(2) {
		t.Errorf("list --json: exit %d, %v, %s", code, err, out)
	}
	out, _, code = cli(t, "jobs", "show", fmt.Sprint(ids[2]), "--database-url", db.URL)
	if want := `waits for a slot of limit "provider", partition ["eu"]: 2 of 2 slots held; 0 jobs of the partition ahead of it`; code != 0 || !strings.Contains(out, want) {
		t.Errorf("jobs show of a limited job: exit %d, stdout:\n%s\nwant it to contain %q", code, out, want)
	}
	out, _, code = cli(t, "jobs", "show", fmt.Sprint(ids[2]), "--json", "--database-url", db.URL)
	var shown struct {
		State string
		Wait  map[string]any
	}
	if err := json.Unmarshal([]byte(out), &shown); code != 0 || err != nil || shown.State != "limited" || shown.Wait == nil {
		t.Fatalf("jobs show --json of a limited job: exit %d, %v, stdout:\n%s", code, err, out)
	}
	want := map[string]any{
		"reason": `waits for a slot of limit "provider", partition ["eu"]: 2 of 2 slots held; 0 jobs of the partition ahead of it`,
		"limit":  "provider", "partition": `["eu"]`, "limit_gone": false, "concurrency": float64(2), "slots_held": float64(2),
		"rate": float64(0), "period_seconds": float64(0), "starts_in_period": float64(0), "ahead": float64(0), "ahead_capped": false,
	}
	for k, v := range want {
		if shown.Wait[k] != v {
			t.Errorf("jobs show --json: wait.%s = %v, want %v", k, shown.Wait[k], v)
		}
	}
	out, _, code = cli(t, "jobs", "show", fmt.Sprint(ids[0]), "--json", "--database-url", db.URL)
	if code != 0 || strings.Contains(out, `"wait"`) {
		t.Errorf("jobs show --json of a running job: exit %d, want no wait; stdout:\n%s", code, out)
	}
	_, errs, code = cli(t, "limits", "set", "bad", "--queue", "calls", "--rate", "5", "--database-url", db.URL)
	if want := "pgqueue: invalid limit: Period must be positive with a Rate"; code == 0 || !strings.Contains(errs, want) {
		t.Errorf("set without a period: exit %d, stderr %q, want %q", code, errs, want)
	}
	_, errs, code = cli(t, "limits", "set", "bad", "--queue", "calls", "--concurrency", "1", "--fair-weights", "acme=x", "--database-url", db.URL)
	if want := `--fair-weights: pgqueue: invalid limit: FairWeights weight "x" of key "acme" is not a whole number`; code == 0 || !strings.Contains(errs, want) {
		t.Errorf("set with a bad weight: exit %d, stderr %q, want %q", code, errs, want)
	}
	_, errs, code = cli(t, "limits", "set", "bad", "--queue", "calls", "--concurrency", "1", "--fair-weights", "acme=2", "--database-url", db.URL)
	if want := "pgqueue: invalid limit: FairWeights is set without FairBy"; code == 0 || !strings.Contains(errs, want) {
		t.Errorf("set weights without --fair-by: exit %d, stderr %q, want %q", code, errs, want)
	}
	out, errs, code = cli(t, "limits", "set", "shared", "--queue", "tenants", "--concurrency", "4", "--fair-by", "tenant",
		"--fair-weights", "globex=2,acme=3", "--database-url", db.URL)
	if code != 0 {
		t.Fatalf("set a fair limit: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	out, _, _ = cli(t, "limits", "list", "--database-url", db.URL)
	if lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); len(lines) != 3 || words(lines[2]) != "shared tenants - - 4 0 - - release tenant (acme=3,globex=2) 0 0" {
		t.Errorf("list with a fair limit:\n%s", out)
	}
	out, _, _ = cli(t, "limits", "list", "--json", "--database-url", db.URL)
	if !strings.Contains(out, `"fair_by": "tenant"`) || !strings.Contains(out, `"acme": 3`) {
		t.Errorf("list --json does not show the fair limit's field and weights:\n%s", out)
	}
	// The jobs the delete makes available wake the workers of their
	// queue, once the command's transaction has committed and before the
	// command closes its pool.
	wakes := pgtest.Listen(t, db.Pool, "jobfence_insert")
	out, errs, code = cli(t, "limits", "delete", "provider", "--database-url", db.URL)
	if code != 0 || out != "limit provider deleted; its waiting jobs are released\n" {
		t.Fatalf("delete: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	wakes.Next(t, time.Minute, "calls")
	if j, err := c.Get(ctx, ids[2]); err != nil || j.State != queue.StateAvailable {
		t.Fatalf("after delete the waiting job is %v, %v; want available", j.State, err)
	}
	_, errs, code = cli(t, "limits", "delete", "provider", "--database-url", db.URL)
	if code == 0 || !strings.Contains(errs, "no such limit") {
		t.Errorf("delete again: exit %d, stderr %q", code, errs)
	}
}
