package pgqueue_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// stateAndAttempt reads a job's state and attempt.
func stateAndAttempt(t *testing.T, c *pgqueue.Client, id int64) (queue.State, int) {
	t.Helper()
	j, err := c.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return j.State, j.Attempt
}

// TestPromoteMakesDueJobsClaimable: a claim takes only available jobs;
// scheduled and retryable jobs whose time has come become claimable once
// promoted, those still in the future stay where they are, and the
// promotion wakes the queue's workers.
func TestPromoteMakesDueJobsClaimable(t *testing.T) {
	c, db := newClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wake, _ := c.Wake(ctx, "mail")
	at := time.Now().Add(300 * time.Millisecond)
	soon, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: "mail", ScheduledAt: at})
	if err != nil {
		t.Fatal(err)
	}
	later, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: "mail", ScheduledAt: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	// A retry whose backoff is a microsecond: retryable, and due at once.
	if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: "mail"}); err != nil {
		t.Fatal(err)
	}
	failed := claim(t, c, "mail", 10, time.Minute)
	if len(failed) != 1 {
		t.Fatalf("claimed %d jobs, want only the one enqueued to run now", len(failed))
	}
	if _, err := c.Finish(ctx, []queue.Finish{{Lease: failed[0].Lease(), Outcome: queue.OutcomeRetry, Delay: time.Microsecond,
		Error: &queue.AttemptError{Attempt: 1, At: time.Now(), Error: "boom"}}}); err != nil {
		t.Fatal(err)
	}
	if st, _ := stateAndAttempt(t, c, failed[0].ID); st != queue.StateRetryable {
		t.Fatalf("failed job is %s, want retryable", st)
	}
	if got := claim(t, c, "mail", 10, time.Minute); len(got) != 0 {
		t.Fatalf("a claim took %d jobs before promotion; claims read only available jobs", len(got))
	}
	time.Sleep(time.Until(at) + 50*time.Millisecond)
	for len(wake) > 0 {
		<-wake
	}
	// The LISTEN connection starts asynchronously: promote once it is up.
	if _, err := db.Pool.Exec(ctx, "SELECT pg_sleep(0.2)"); err != nil {
		t.Fatal(err)
	}
	n, err := c.Promote(ctx, 100)
	if err != nil || len(n) != 1 || n["mail"] != 2 {
		t.Fatalf("Promote = %v, %v; want 2 jobs of queue mail", n, err)
	}
	select {
	case <-wake:
	case <-time.After(10 * time.Second):
		t.Fatal("promotion woke no worker")
	}
	got := claim(t, c, "mail", 10, time.Minute)
	ids := map[int64]bool{}
	for _, j := range got {
		ids[j.ID] = true
	}
	if len(got) != 2 || !ids[soon.ID] || !ids[failed[0].ID] {
		t.Fatalf("claimed %v after promotion, want jobs %d (scheduled) and %d (retry)", ids, soon.ID, failed[0].ID)
	}
	if st, _ := stateAndAttempt(t, c, later.ID); st != queue.StateScheduled {
		t.Fatalf("the job due in an hour is %s, want scheduled", st)
	}
	if n, err := c.Promote(ctx, 100); err != nil || len(n) != 0 {
		t.Fatalf("second Promote = %v, %v; want nothing due", n, err)
	}
}

// TestPromoteConcurrently: promoters running at once move every due job
// exactly once, between them, in bounded batches.
func TestPromoteConcurrently(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	const due, future = 3000, 500
	if _, err := db.Pool.Exec(ctx, `INSERT INTO jobfence_jobs (queue, kind, state, scheduled_at)
		SELECT 'q' || (i % 3), 'k', CASE WHEN i % 2 = 0 THEN 'scheduled' ELSE 'retryable' END, now() - i * interval '1 ms'
		FROM generate_series(1, $1) AS i`, due); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO jobfence_jobs (kind, state, scheduled_at)
		SELECT 'k', 'retryable', now() + interval '1 hour' FROM generate_series(1, $1)`, future); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	total := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n, err := c.Promote(ctx, 100)
				if err != nil {
					errs <- err
					return
				}
				sum := 0
				mu.Lock()
				for q, k := range n {
					total[q] += k
					sum += k
				}
				mu.Unlock()
				if sum > 100 {
					errs <- fmt.Errorf("one Promote moved %d jobs, more than its limit 100", sum)
					return
				}
				if sum == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if total["q0"]+total["q1"]+total["q2"] != due || total["q0"] != due/3 {
		t.Fatalf("promoters reported %v, want %d jobs in all, %d per queue", total, due, due/3)
	}
	counts, err := c.Counts(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if counts[queue.StateAvailable] != due || counts[queue.StateRetryable] != future || counts[queue.StateScheduled] != 0 {
		t.Fatalf("states after promotion: %v; want %d available and the %d future retries left", counts, due, future)
	}
}

// TestSnoozeAndPutBackComeBack: a snoozed job waits its delay as
// scheduled, keeps its attempt, and is claimed again once promoted; a
// job put back without a delay is available at once.
func TestSnoozeAndPutBackComeBack(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	for range 2 {
		if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: "s"}); err != nil {
			t.Fatal(err)
		}
	}
	jobs := claim(t, c, "s", 2, time.Minute)
	if len(jobs) != 2 {
		t.Fatalf("claimed %d jobs, want 2", len(jobs))
	}
	snoozed, putBack := jobs[0], jobs[1]
	if _, err := c.Finish(ctx, []queue.Finish{
		{Lease: snoozed.Lease(), Outcome: queue.OutcomeSnooze, Delay: 200 * time.Millisecond},
		{Lease: putBack.Lease(), Outcome: queue.OutcomeSnooze},
	}); err != nil {
		t.Fatal(err)
	}
	if st, attempt := stateAndAttempt(t, c, snoozed.ID); st != queue.StateScheduled || attempt != 0 {
		t.Fatalf("snoozed job: %s, attempt %d; want scheduled, attempt given back", st, attempt)
	}
	if st, attempt := stateAndAttempt(t, c, putBack.ID); st != queue.StateAvailable || attempt != 0 {
		t.Fatalf("put-back job: %s, attempt %d; want available, attempt given back", st, attempt)
	}
	if got := claim(t, c, "s", 2, time.Minute); len(got) != 1 || got[0].ID != putBack.ID {
		t.Fatalf("claim before the snooze ended took %d jobs, want only the put-back one", len(got))
	}
	time.Sleep(250 * time.Millisecond)
	if _, err := c.Promote(ctx, 10); err != nil {
		t.Fatal(err)
	}
	got := claim(t, c, "s", 2, time.Minute)
	if len(got) != 1 || got[0].ID != snoozed.ID || got[0].Attempt != 1 {
		t.Fatalf("claim after the snooze took %d jobs (%v), want the snoozed job on attempt 1 again", len(got), got)
	}
}

// TestRescuedJobWaitsForItsTime: a rescued job is retryable, not
// claimable, until its backoff has passed and a promoter has made it
// available; with no backoff, the next promotion does.
func TestRescuedJobWaitsForItsTime(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	for range 2 {
		if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "charge", Queue: "r"}); err != nil {
			t.Fatal(err)
		}
	}
	jobs := claim(t, c, "r", 2, time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	n, err := c.Rescue(ctx, queue.RescueParams{Limit: 10, Backoff: func(j *queue.Job) time.Duration {
		if j.ID == jobs[0].ID {
			return 0
		}
		return time.Hour
	}})
	if err != nil || n != 2 {
		t.Fatalf("rescue = %d, %v; want 2", n, err)
	}
	for _, j := range jobs {
		if st, _ := stateAndAttempt(t, c, j.ID); st != queue.StateRetryable {
			t.Fatalf("rescued job %d is %s, want retryable", j.ID, st)
		}
	}
	if got := claim(t, c, "r", 2, time.Minute); len(got) != 0 {
		t.Fatalf("claimed %d rescued jobs before promotion", len(got))
	}
	if p, err := c.Promote(ctx, 10); err != nil || p["r"] != 1 {
		t.Fatalf("Promote = %v, %v; want the job without backoff", p, err)
	}
	if got := claim(t, c, "r", 2, time.Minute); len(got) != 1 || got[0].ID != jobs[0].ID || got[0].Attempt != 2 {
		t.Fatalf("claimed %v after promotion, want job %d on attempt 2", got, jobs[0].ID)
	}
}

// TestClaimIgnoresFutureJobs: a claim's cost does not grow with the jobs
// waiting for the future: with 50,000 future retries and 5 ready jobs, a
// claim of up to 1,000 finds its jobs in a handful of buffers, not by
// walking the future rows' index entries (the index that held them all
// read 310 buffers here).
func TestClaimIgnoresFutureJobs(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO jobfence_jobs (kind, state, attempt, scheduled_at)
		SELECT 'k', 'retryable', 1, now() + interval '1 hour' + i * interval '1 ms' FROM generate_series(1, 50000) AS i`); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Pool.Exec(ctx, "VACUUM ANALYZE jobfence_jobs"); err != nil {
		t.Fatal(err)
	}
	plan, err := c.ExplainClaim(ctx, queue.ClaimParams{Queue: queue.DefaultQueue, Limit: 1000, Lease: time.Minute, WorkerID: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if plan.Jobs != 5 || plan.FindBuffers > 20 || plan.FindBuffers == 0 || plan.Buffers < plan.FindBuffers {
		t.Fatalf("claim took %d jobs, finding them in %d buffers (%d in all) in %s; want 5 jobs found in 20 buffers at most:\n%s",
			plan.Jobs, plan.FindBuffers, plan.Buffers, plan.Execution, plan.Plan)
	}
	// Rolled back: the jobs are still there to claim.
	if got := claim(t, c, queue.DefaultQueue, 1000, time.Minute); len(got) != 5 {
		t.Fatalf("claimed %d jobs after ExplainClaim, want the 5 it rolled back", len(got))
	}
}
