package pgqueue_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestUniqueByStateLimitedPending proves what UniqueOpts.ByState's doc
// says of the two states it does not list by default: a job waiting for a
// limit's slot refuses a duplicate whatever ByState holds (nil, the four
// unfinished states, or those and limited); pending in ByState is accepted
// and changes nothing, since no unique job is ever pending: a workflow
// task cannot be unique.
func TestUniqueByStateLimitedPending(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	setLimit(t, c, pgqueue.Limit{Name: "one", Queue: "mail", Concurrency: 1})
	// The filler, claimed, holds the limit's one slot: every later job of
	// mail waits for it.
	if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "filler", Queue: "mail"}); err != nil {
		t.Fatal(err)
	}
	if got := claim(t, c, "mail", 1, time.Minute); len(got) != 1 {
		t.Fatalf("claimed %d fillers, want 1", len(got))
	}
	unfinished := queue.UniqueUnfinished()
	for i, byState := range [][]queue.State{nil, unfinished, append(unfinished, queue.StateLimited)} {
		p := queue.EnqueueParams{Kind: fmt.Sprint("digest-", i), Queue: "mail", Unique: &queue.UniqueOpts{ByState: byState}}
		first, err := c.Enqueue(ctx, p)
		if err != nil || !first.Inserted || first.State != queue.StateLimited {
			t.Fatalf("ByState %v: %+v, %v; want a job inserted, limited", byState, first, err)
		}
		dup, err := c.Enqueue(ctx, p)
		if err != nil || dup.Inserted || dup.ID != first.ID || dup.State != queue.StateLimited {
			t.Errorf("ByState %v: a duplicate of a limited job gives %+v, %v; want it refused, job %d limited", byState, dup, err, first.ID)
		}
	}

	// Pending, named: the job refuses duplicates as the four states alone
	// would, and lets one through once it is completed.
	p := queue.EnqueueParams{Kind: "sync", Queue: "other", Unique: &queue.UniqueOpts{ByState: append(unfinished, queue.StatePending)}}
	first, err := c.Enqueue(ctx, p)
	if err != nil || !first.Inserted || first.State != queue.StateAvailable {
		t.Fatalf("ByState with pending: %+v, %v; want a job inserted, available", first, err)
	}
	if dup, err := c.Enqueue(ctx, p); err != nil || dup.Inserted || dup.ID != first.ID {
		t.Errorf("ByState with pending: a duplicate gives %+v, %v; want it refused", dup, err)
	}
	complete(t, c, claim(t, c, "other", 1, time.Minute)...)
	if next, err := c.Enqueue(ctx, p); err != nil || !next.Inserted {
		t.Errorf("ByState with pending: a duplicate of the completed job gives %+v, %v; want it inserted", next, err)
	}
	// And no unique job is ever pending: a workflow's task cannot be one.
	task := queue.WorkflowTask{Name: "t", Params: queue.EnqueueParams{Kind: "step", Unique: &queue.UniqueOpts{ByState: append(unfinished, queue.StatePending)}}}
	if _, err := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: "w", Tasks: []queue.WorkflowTask{task}}); err == nil ||
		!strings.Contains(err.Error(), `task "t" has a unique key: a workflow's tasks cannot`) {
		t.Errorf("a workflow with a unique task: %v, want it refused", err)
	}
}
