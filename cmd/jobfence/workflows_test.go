package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestWorkflowsCommand: list, show (tasks, dependencies, outputs,
// reasons), retry resumes a failed workflow, cancel cancels what has not
// started, and bad input gets a clear error.
func TestWorkflowsCommand(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{})
	task := func(name string, deps ...string) queue.WorkflowTask {
		return queue.WorkflowTask{Name: name, Params: queue.EnqueueParams{Kind: name}, DependsOn: deps}
	}
	res, err := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: "order 7", Tasks: []queue.WorkflowTask{
		task("charge"), task("reserve", "charge"), task("ship", "reserve"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	claimFinish := func(f queue.Finish) {
		t.Helper()
		jobs, err := c.Claim(ctx, queue.ClaimParams{Queue: "default", Limit: 1, Lease: time.Minute})
		if err != nil || len(jobs) != 1 {
			t.Fatalf("claim: %v, %v", jobs, err)
		}
		f.Lease, f.Workflow = jobs[0].Lease(), true
		if _, err := c.Finish(ctx, []queue.Finish{f}); err != nil {
			t.Fatal(err)
		}
	}
	claimFinish(queue.Finish{Outcome: queue.OutcomeComplete, Output: []byte(`{"charge_id":"ch_7"}`)})
	claimFinish(queue.Finish{Outcome: queue.OutcomeDiscard, Error: &queue.AttemptError{Attempt: 1, Error: "out of stock"}})
	jobfence := func(args ...string) (string, int) {
		var out, errb bytes.Buffer
		code := run(ctx, append([]string{"workflows", "--database-url", db.URL}, args...), &out, &errb)
		return out.String() + errb.String(), code
	}
	// A range of charge's dependents left to release, as a completing
	// client that stopped leaves one.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO jobfence_releases (task_id, first, last) VALUES ($1, 2, 2)`, res.Tasks["charge"]); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		args     []string
		wantCode int
		want     []string
	}{
		{[]string{"show", res.ID}, 0, []string{"ranges of dependents left to release after their tasks' completion: 1"}},
		{[]string{"list"}, 0, []string{res.ID + "  order 7", "3      yes   completed 1, discarded 1, cancelled 1"}},
		{[]string{"show", res.ID}, 0, []string{`workflow ` + res.ID + ` "order 7"`, `{"charge_id": "ch_7"}`, "error: out of stock",
			`error: jobfence: dependency failed: task "reserve" was discarded`, "reserve  "}},
		{[]string{"retry", res.ID}, 0, []string{"resumed: 2 discarded or cancelled tasks run again"}},
		{[]string{"show", res.ID}, 0, []string{"available", "reserve (1 left)"}},
		{[]string{"cancel", res.ID}, 0, []string{"2 tasks that had not started cancelled"}},
		{[]string{"show", "00000000-0000-0000-0000-000000000000"}, 1, []string{"jobfence: workflow not found"}},
		{[]string{"show", "nope"}, 1, []string{`workflow "nope": jobfence: workflow not found (not a UUID)`}},
		{[]string{"show"}, 1, []string{"workflows show wants the workflow's ID"}},
		{[]string{"frob"}, 1, []string{`unknown workflows action "frob"`}},
	} {
		out, code := jobfence(s.args...)
		if code != s.wantCode {
			t.Fatalf("workflows %v: exit %d, want %d:\n%s", s.args, code, s.wantCode, out)
		}
		for _, w := range s.want {
			if !strings.Contains(out, w) {
				t.Fatalf("workflows %v:\n%s\nwant it to contain %q", s.args, out, w)
			}
		}
	}
}
