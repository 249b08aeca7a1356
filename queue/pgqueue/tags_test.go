package pgqueue_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestTagsStoredOnEveryInsertPath: a job's tags come back from Get,
// deduplicated, whichever statement inserted it (one insert plain, keyed,
// hashed or debounced; a batch's COPY, keyed and hashed inserts; a
// transaction's insert), a job without tags has none, and a completed job
// keeps its tags when it moves to the finished table.
func TestTagsStoredOnEveryInsertPath(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	if _, err := c.MaintainFinished(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	tags := []string{"customer:c1", "urgent", "customer:c1"}
	want := []string{"customer:c1", "urgent"}
	check := func(what string, id int64, want []string) {
		t.Helper()
		j, err := c.Get(ctx, id)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !slices.Equal(j.Tags, want) {
			t.Errorf("%s: tags %q, want %q", what, j.Tags, want)
		}
	}
	one := map[string]queue.EnqueueParams{
		"plain":     {Kind: "k", Tags: tags},
		"keyed":     {Kind: "k", Tags: tags, UniqueKey: "u1"},
		"hashed":    {Kind: "k", Tags: tags, Unique: &queue.UniqueOpts{ByArgs: true}, Args: []byte(`{"n":1}`)},
		"debounced": {Kind: "k", Tags: tags, Unique: &queue.UniqueOpts{ByArgs: true, Debounce: true}, Args: []byte(`{"n":2}`)},
		"scheduled": {Kind: "k", Tags: tags, ScheduledAt: time.Now().Add(time.Hour)},
		"untagged":  {Kind: "k"},
	}
	for name, p := range one {
		res, err := c.Enqueue(ctx, p)
		if err != nil || !res.Inserted {
			t.Fatalf("%s: %+v, %v", name, res, err)
		}
		w := want
		if p.Tags == nil {
			w = nil
		}
		check(name, res.ID, w)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.EnqueueTx(ctx, tx, queue.EnqueueParams{Kind: "k", Tags: tags})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	check("in a transaction", res.ID, want)

	// A batch: COPY (plain jobs, one without tags among them), the keyed
	// insert and the hashed one, each with a job without tags too.
	batch := []queue.EnqueueParams{
		{Kind: "many", Queue: "many"}, {Kind: "many", Queue: "many", Tags: []string{"copied"}},
		{Kind: "many", Queue: "many", UniqueKey: "m1"}, {Kind: "many", Queue: "many", UniqueKey: "m2", Tags: []string{"keyed", "keyed"}},
		{Kind: "many", Queue: "many", Unique: &queue.UniqueOpts{ByArgs: true}, Args: []byte(`{"h":1}`)},
		{Kind: "many", Queue: "many", Unique: &queue.UniqueOpts{ByArgs: true}, Args: []byte(`{"h":2}`), Tags: []string{"hashed", "x"}},
	}
	if n, err := c.EnqueueMany(ctx, batch); err != nil || n != 6 {
		t.Fatalf("EnqueueMany = %d, %v", n, err)
	}
	jobs, err := c.List(ctx, pgqueue.ListParams{Queue: "many"})
	if err != nil || len(jobs) != 6 {
		t.Fatalf("List = %d jobs, %v", len(jobs), err)
	}
	slices.Reverse(jobs)
	for i, wantTags := range [][]string{nil, {"copied"}, nil, {"keyed"}, nil, {"hashed", "x"}} {
		if !slices.Equal(jobs[i].Tags, wantTags) {
			t.Errorf("batch job %d: tags %q, want %q", i, jobs[i].Tags, wantTags)
		}
	}
	// An untagged batch through COPY stores NULL, not an empty array.
	if n, err := c.EnqueueMany(ctx, []queue.EnqueueParams{{Kind: "bare", Queue: "bare"}}); err != nil || n != 1 {
		t.Fatalf("EnqueueMany = %d, %v", n, err)
	}
	var nulls int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE tags IS NULL`).Scan(&nulls); err != nil || nulls != 5 {
		t.Fatalf("jobs stored with NULL tags: %d, %v; want the 5 untagged ones", nulls, err)
	}

	// Completed, a job moves to the finished table with its tags, and
	// a forced retry brings them back.
	j := claimNew(t, c, queue.EnqueueParams{Kind: "done", Tags: []string{"moved"}})
	if err := c.Complete(ctx, j.Lease()); err != nil {
		t.Fatal(err)
	}
	if got := where(t, db.Pool, j.ID); got != "finished" {
		t.Fatalf("completed job in %q, want finished", got)
	}
	check("finished", j.ID, []string{"moved"})
	if err := c.RetryForce(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if got := where(t, db.Pool, j.ID); got != "jobs" {
		t.Fatalf("retried job in %q, want jobs", got)
	}
	check("retried back", j.ID, []string{"moved"})
}

// TestBadTagsStoreNothing: an insert with tags that break the rules fails
// with an error wrapping queue.ErrBadTag that names the tag, and stores
// nothing, one job or a batch, whichever job of the batch is wrong.
func TestBadTagsStoreNothing(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	_, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Tags: []string{"ok", "not ok"}})
	if !errors.Is(err, queue.ErrBadTag) || !strings.Contains(err.Error(), `tag 1 ("not ok") holds ' '`) {
		t.Fatalf("Enqueue = %v, want ErrBadTag naming the tag", err)
	}
	_, err = c.Insert(ctx, emailArgs{To: "x"}, &queue.InsertOpts{Tags: make([]string, 17)})
	if !errors.Is(err, queue.ErrBadTag) || !strings.Contains(err.Error(), "has 17 tags: at most 16") {
		t.Fatalf("Insert = %v, want ErrBadTag naming the count", err)
	}
	n, err := c.EnqueueMany(ctx, []queue.EnqueueParams{{Kind: "k", Tags: []string{"fine"}}, {Kind: "k", UniqueKey: "u", Tags: []string{strings.Repeat("z", 101)}}})
	if !errors.Is(err, queue.ErrBadTag) || n != 0 || !strings.Contains(err.Error(), "job 1") {
		t.Fatalf("EnqueueMany = %d, %v; want ErrBadTag for job 1", n, err)
	}
	_, err = c.InsertWorkflow(ctx, queue.WorkflowParams{Name: "w", Tasks: []queue.WorkflowTask{{Name: "a", Params: queue.EnqueueParams{Kind: "k", Tags: []string{"t"}}}}})
	if !errors.Is(err, queue.ErrInvalidWorkflow) || !strings.Contains(err.Error(), "carry no tags") {
		t.Fatalf("InsertWorkflow with tags = %v, want it refused", err)
	}
	counts, err := c.Counts(ctx, "")
	if err != nil || len(counts) != 0 {
		t.Fatalf("rejected inserts stored jobs: %v, %v", counts, err)
	}
}
