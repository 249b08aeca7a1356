package pgqueue_test

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

var jobKeyRE = regexp.MustCompile(`^jobfence-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// TestIdempotencyKeyAcrossDatabases: the same job ID in two schemas (two
// databases: a staging and a production one) has two different
// idempotency keys, random per job; a job's key is the same on each of its
// attempts and on the job Get and List read, whichever insert path made
// it. A job inserted without a key (before migration 00010) keeps the key
// its earlier attempts used.
func TestIdempotencyKeyAcrossDatabases(t *testing.T) {
	ctx := context.Background()
	prod, _ := newClient(t)
	staging, _ := newClient(t)
	keyOf := func(c *pgqueue.Client) (int64, string) {
		t.Helper()
		res, err := c.Insert(ctx, emailArgs{To: "a@example.com"}, &queue.InsertOpts{Queue: "keys"})
		if err != nil {
			t.Fatal(err)
		}
		jobs := claim(t, c, "keys", 1, time.Minute)
		if len(jobs) != 1 || jobs[0].ID != res.ID {
			t.Fatalf("claimed %v, want job %d", jobs, res.ID)
		}
		key := jobs[0].IdempotencyKey()
		if !jobKeyRE.MatchString(key) || jobs[0].Key != key {
			t.Fatalf("job %d: IdempotencyKey() %q (Key %q), want jobfence-<uuid v4>", res.ID, key, jobs[0].Key)
		}
		// A retry claims the job again, under a new fence, with the key.
		if stale, err := c.Finish(ctx, []queue.Finish{{Lease: jobs[0].Lease(), Outcome: queue.OutcomeRetry,
			Error: &queue.AttemptError{Attempt: 1, Error: "boom"}}}); err != nil || len(stale) > 0 {
			t.Fatalf("retry: %v %v", stale, err)
		}
		if _, err := c.Promote(ctx, 10); err != nil {
			t.Fatal(err)
		}
		again := claim(t, c, "keys", 1, time.Minute)
		if len(again) != 1 || again[0].Attempt != 2 || again[0].Fence <= jobs[0].Fence {
			t.Fatalf("second claim %+v, want attempt 2 of job %d under a newer fence", again, res.ID)
		}
		if k := again[0].IdempotencyKey(); k != key {
			t.Fatalf("attempt 2's key %q, want attempt 1's %q", k, key)
		}
		got, err := c.Get(ctx, res.ID)
		if err != nil || got.IdempotencyKey() != key {
			t.Fatalf("Get: key %q, %v; want %q", got.IdempotencyKey(), err, key)
		}
		listed, err := c.List(ctx, pgqueue.ListParams{Queue: "keys"})
		if err != nil || len(listed) != 1 || listed[0].IdempotencyKey() != key {
			t.Fatalf("List: %v, %v; want the job with key %q", listed, err, key)
		}
		return res.ID, key
	}
	prodID, prodKey := keyOf(prod)
	stagingID, stagingKey := keyOf(staging)
	if prodID != stagingID {
		t.Fatalf("job IDs %d and %d: the test wants the same ID in both schemas", prodID, stagingID)
	}
	if prodKey == stagingKey {
		t.Fatalf("job %d has key %q in both databases", prodID, prodKey)
	}

	// Every insert path draws a key of its own for each job.
	if _, err := prod.EnqueueMany(ctx, []queue.EnqueueParams{
		{Kind: "k", Queue: "many"}, {Kind: "k", Queue: "many"}, // COPY
		{Kind: "k", Queue: "many", UniqueKey: "u"}, {Kind: "k", Queue: "many", ScheduledAt: time.Now().Add(-time.Second)},
	}); err != nil {
		t.Fatal(err)
	}
	listed, err := prod.List(ctx, pgqueue.ListParams{Queue: "many"})
	if err != nil || len(listed) != 4 {
		t.Fatalf("List: %d jobs, %v; want 4", len(listed), err)
	}
	seen := map[string]bool{prodKey: true, stagingKey: true}
	for _, j := range listed {
		if k := j.IdempotencyKey(); !jobKeyRE.MatchString(k) || seen[k] {
			t.Errorf("job %d: key %q, want a jobfence-<uuid v4> of its own", j.ID, k)
		}
		seen[j.IdempotencyKey()] = true
	}

	// A job of a release before migration 00010 has no key and keeps its
	// old one on the attempts this release makes.
	var id int64
	if err := prod.Pool().QueryRow(ctx, `INSERT INTO jobfence_jobs (queue, kind) VALUES ('old', 'k') RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	jobs := claim(t, prod, "old", 1, time.Minute)
	if len(jobs) != 1 || jobs[0].Key != "" || jobs[0].IdempotencyKey() != "jobfence-job-"+strconv.FormatInt(id, 10) {
		t.Fatalf("old job: %+v, want key jobfence-job-%d", jobs, id)
	}
}
