package pgqueue_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/sqlfreeze"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// finishClaim sends jobs' completions as a worker does, each naming its
// partition, asking to claim the next job of those in next.
func finishClaim(t *testing.T, c *pgqueue.Client, worker string, lease time.Duration, jobs []*queue.Job, next map[int64]bool) []*queue.Job {
	t.Helper()
	fs := make([]queue.Finish, len(jobs))
	for i, j := range jobs {
		fs[i] = queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeComplete, Limit: j.Limit, LimitPartition: j.LimitPartition, ClaimNext: next[j.ID]}
	}
	stale, claimed, err := c.FinishClaim(context.Background(), fs, queue.FinishClaimParams{Lease: lease, WorkerID: worker})
	if err != nil || len(stale) > 0 {
		t.Fatalf("FinishClaim = %v stale, %v", stale, err)
	}
	return claimed
}

// TestFinishClaimTakesTheNextJob: completions that ask for it claim, in
// their own round trip, the next job of the partition whose slot they
// free, for their worker: running, under a fence newer than any before,
// leased, the attempt counted and the worker recorded; one per completion
// that asks, none for one that does not (its partition's next job is
// made available for any claim), and no partition over its limit.
func TestFinishClaimTakesTheNextJob(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	running := partitionedRunning(t, c, "fc")
	var fence int64
	for _, j := range running {
		fence = max(fence, j.Fence)
	}
	next := map[int64]bool{running[0].ID: true, running[1].ID: true}
	began := time.Now()
	got := finishClaim(t, c, "w2", time.Minute, running, next)
	if len(got) != 2 {
		t.Fatalf("claimed %d jobs, want one for each of the 2 completions that asked", len(got))
	}
	parts := map[string]bool{}
	for _, j := range got {
		if j.State != queue.StateRunning || j.Attempt != 1 || j.Fence <= fence ||
			len(j.AttemptedBy) == 0 || j.AttemptedBy[len(j.AttemptedBy)-1] != "w2" || j.LeaseExpiresAt.Before(began.Add(30*time.Second)) {
			t.Fatalf("claimed job %d: state %s, attempt %d, fence %d (before: %d), by %v, lease until %v; want running, attempt 1, a newer fence, by w2, leased a minute",
				j.ID, j.State, j.Attempt, j.Fence, fence, j.AttemptedBy, j.LeaseExpiresAt)
		}
		if st := stateOf(t, c, j.ID); st != queue.StateRunning {
			t.Fatalf("job %d is %s in the table, want running", j.ID, st)
		}
		parts[j.LimitPartition] = true
	}
	if !parts[running[0].LimitPartition] || !parts[running[1].LimitPartition] {
		t.Fatalf("claimed the partitions %v, want those of the completions that asked, %s and %s", parts, running[0].LimitPartition, running[1].LimitPartition)
	}
	overLimit(t, db, "fc", 1)
	// The third partition's next job went to any claim.
	third := claim(t, c, "fc", 10, time.Minute)
	if len(third) != 1 || third[0].LimitPartition != running[2].LimitPartition {
		t.Fatalf("claimed %v after the completions, want the third partition's next job", third)
	}
	// Run out: completions that ask find nothing left to claim.
	if more := finishClaim(t, c, "w2", time.Minute, append(got, third...), map[int64]bool{got[0].ID: true, third[0].ID: true}); len(more) != 0 {
		t.Fatalf("claimed %d jobs with none waiting", len(more))
	}
	var left int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE queue = 'fc' AND state <> 'completed'`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d jobs not completed (%v), want every job run once", left, err)
	}
}

// TestFinishClaimSkipsAPausedQueue: a completion of a paused queue's job
// frees its slot for the next job, which is made available, not claimed.
func TestFinishClaimSkipsAPausedQueue(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	running := partitionedRunning(t, c, "fp")
	if err := c.PauseQueue(ctx, "fp", "test"); err != nil {
		t.Fatal(err)
	}
	if got := finishClaim(t, c, "w", time.Minute, running[:1], map[int64]bool{running[0].ID: true}); len(got) != 0 {
		t.Fatalf("claimed %d jobs of a paused queue", len(got))
	}
	if err := c.ResumeQueue(ctx, "fp", "test"); err != nil {
		t.Fatal(err)
	}
	if got := claim(t, c, "fp", 10, time.Minute); len(got) != 1 || got[0].LimitPartition != running[0].LimitPartition {
		t.Fatalf("after the resume claimed %v, want the freed partition's next job", got)
	}
}

// TestZombieFinishClaimsNothing: a zombie's completion, stale, claims
// nothing, even when the slot its job held lies free (its job was rescued
// and the rescue's grant did not run): only a slot that the call's own
// applied outcome freed is claimed into. The slot goes to the next job
// all the same, made available, its attempt not counted.
func TestZombieFinishClaimsNothing(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	setLimit(t, c, pgqueue.Limit{Name: "zc", Queue: "zc", Concurrency: 1})
	ids := enqueueN(t, c, queue.EnqueueParams{Kind: "k", Queue: "zc"}, 2)
	zombie := claim(t, c, "zc", 10, time.Minute)
	if len(zombie) != 1 || zombie[0].ID != ids[0] {
		t.Fatalf("claimed %v, want job %d", zombie, ids[0])
	}
	// Rescued, as a rescuer does once the lease ran out, without the
	// grant that follows a rescue: the slot is free, still naming the job.
	if _, err := db.Pool.Exec(ctx, `UPDATE jobfence_jobs SET state = 'retryable', scheduled_at = now() + interval '1 hour', lease_expires_at = NULL WHERE id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	fs := []queue.Finish{{Lease: zombie[0].Lease(), Outcome: queue.OutcomeComplete, Limit: zombie[0].Limit, LimitPartition: zombie[0].LimitPartition, ClaimNext: true}}
	stale, got, err := c.FinishClaim(ctx, fs, queue.FinishClaimParams{Lease: time.Minute, WorkerID: "zombie"})
	if err != nil || len(stale) != 1 {
		t.Fatalf("the zombie's FinishClaim = %v stale, %v; want its lease stale", stale, err)
	}
	if len(got) != 0 {
		t.Fatalf("the zombie's stale completion claimed %d jobs", len(got))
	}
	next := claim(t, c, "zc", 10, time.Minute)
	if len(next) != 1 || next[0].ID != ids[1] || next[0].Attempt != 1 {
		t.Fatalf("claimed %v after the zombie's completion, want job %d at its first attempt", next, ids[1])
	}
}

// TestFrozenFinishClaimerHoldsNothing: a worker frozen as soon as its
// completions' batch is sent (SIGSTOP, a paused VM) holds no lock: the
// server runs the batch, commits the completions and the claims of the
// next jobs, and leaves its backend idle. The jobs it claimed, which it
// will not run while frozen, are rescued when their lease runs out and
// run by another worker; no partition goes over its limit meanwhile.
func TestFrozenFinishClaimerHoldsNothing(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	running := partitionedRunning(t, c, "ff")
	fz, pid, done := frozenFinishClaim(t, db, running, 2*time.Second)
	var taken []int64
	testwatch.WaitFor(t, freezeWithin, "the frozen worker's batch to commit its completions and claims", func() bool {
		rows, err := db.Pool.Query(ctx, `SELECT id FROM jobfence_jobs WHERE queue = 'ff' AND state = 'running' AND 'frozen' = ANY(attempted_by)`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		taken = taken[:0]
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			taken = append(taken, id)
		}
		return len(taken) == 3
	})
	sqlfreeze.WaitIdle(t, db.Pool, pid, freezeWithin)
	for _, j := range running {
		if st := stateOf(t, c, j.ID); st != queue.StateCompleted {
			t.Fatalf("job %d is %s, want completed", j.ID, st)
		}
	}
	overLimit(t, db, "ff", 1)
	// Rescued once their lease has run out, they run elsewhere.
	var rerun []*queue.Job
	testwatch.WaitFor(t, time.Minute, "the frozen worker's claimed jobs to be rescued and claimed again", func() bool {
		if _, err := c.Rescue(ctx, queue.RescueParams{Limit: 10, Backoff: func(*queue.Job) time.Duration { return 0 }}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Promote(ctx, 100); err != nil {
			t.Fatal(err)
		}
		if _, err := c.GrantWaiting(ctx, 100); err != nil {
			t.Fatal(err)
		}
		overLimit(t, db, "ff", 1)
		rerun = append(rerun, claim(t, c, "ff", 10, time.Minute)...)
		return len(rerun) == 3
	})
	for _, j := range rerun {
		if !slices.Contains(taken, j.ID) || j.Attempt != 2 {
			t.Fatalf("claimed job %d at attempt %d after the rescue, want one of the frozen worker's %v at its second attempt", j.ID, j.Attempt, taken)
		}
	}
	fz.Thaw()
	if r := <-done; r.err != nil || len(r.stale) > 0 || len(r.claimed) != 3 {
		t.Fatalf("the thawed FinishClaim = %v stale, %d claimed, %v; want none stale, 3 claimed", r.stale, len(r.claimed), r.err)
	}
	finishHeld(t, c, rerun...)
}

// TestFinishClaimReplyIsBounded: a batch of outcomes claims the next job
// of every partition whose slot its outcomes free (70 partitions, three
// statements), however large the jobs, and what comes back before its
// transaction commits stays what a claim's reply holds (the rows of a few
// jobs, the IDs of the rest), so that a worker frozen as soon as it sent
// the batch still has it committed, holding no lock: 70 jobs of 64 kB,
// were their rows sent before the commit, would fill the sockets' buffers
// and hold the batch, its locks and its claims until the worker thawed.
// Thawed, it gets every job it claimed, whole, those read after the
// commit too.
func TestFinishClaimReplyIsBounded(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	const q, parts = "bounded", 70
	setLimit(t, c, pgqueue.Limit{Name: q, Queue: q, PartitionBy: []string{"p"}, Concurrency: 1})
	pad := strings.Repeat("x", 64<<10)
	for round := range 2 {
		for p := range parts {
			args := fmt.Sprintf(`{"p": %d, "pad": %q}`, p, pad)
			if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: q, Args: []byte(args), Priority: 1 + round}); err != nil {
				t.Fatal(err)
			}
		}
	}
	running := claim(t, c, q, 1000, time.Minute)
	if len(running) != parts {
		t.Fatalf("claimed %d jobs, want one per partition, %d", len(running), parts)
	}
	fz, pid, done := frozenFinishClaim(t, db, running, time.Minute)
	testwatch.WaitFor(t, freezeWithin, "the frozen worker's batch to commit its completions and its claims", func() bool {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE queue = $1 AND state = 'running' AND 'frozen' = ANY(attempted_by)`, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == parts
	})
	sqlfreeze.WaitIdle(t, db.Pool, pid, freezeWithin)
	overLimit(t, db, q, 1)
	fz.Thaw()
	r := <-done
	if r.err != nil || len(r.stale) > 0 || len(r.claimed) != parts {
		t.Fatalf("the thawed FinishClaim = %v stale, %d claimed, %v; want none stale, %d claimed", r.stale, len(r.claimed), r.err, parts)
	}
	for _, j := range r.claimed {
		if j.State != queue.StateRunning || j.Attempt != 1 || !strings.Contains(string(j.EncodedArgs), pad) {
			t.Fatalf("claimed job %d: %s, attempt %d, %d bytes of args; want running, its first attempt, whole", j.ID, j.State, j.Attempt, len(j.EncodedArgs))
		}
	}
	if left := claim(t, c, q, 1000, time.Minute); len(left) != 0 {
		t.Fatalf("%d jobs left available, want every next job claimed by the outcomes", len(left))
	}
}

// TestFinishClaimBesideADeclinedPartition: a batch whose grant statement
// claims the next job of one limit's partition and declines another's
// (a limit with a rate, which grantSQL serves) still returns the job it
// claimed: the statement's claim and the partition it declined come back
// as rows of their own, in either order.
func TestFinishClaimBesideADeclinedPartition(t *testing.T) {
	c, db := newClient(t)
	setLimit(t, c, pgqueue.Limit{Name: "a-conc", Queue: "fd-conc", PartitionBy: []string{"p"}, Concurrency: 1})
	setLimit(t, c, pgqueue.Limit{Name: "b-rate", Queue: "fd-rate", Rate: 100, Period: time.Second})
	next := enqueueN(t, c, queue.EnqueueParams{Kind: "k", Queue: "fd-conc", Args: []byte(`{"p": 1}`)}, 2)[1]
	enqueueN(t, c, queue.EnqueueParams{Kind: "k", Queue: "fd-rate"}, 1)
	running := append(claim(t, c, "fd-conc", 10, time.Minute), claim(t, c, "fd-rate", 10, time.Minute)...)
	if len(running) != 2 {
		t.Fatalf("claimed %d jobs, want one of each limit", len(running))
	}
	ask := map[int64]bool{}
	for _, j := range running {
		ask[j.ID] = j.Queue == "fd-conc"
	}
	// A client of its own, which has not yet learned that the limit with
	// a rate needs grantSQL: its batch asks grantConcurrencySQL first.
	fresh := pgqueue.New(db.Pool, pgqueue.Config{})
	claimed := finishClaim(t, fresh, "w", time.Minute, running, ask)
	if len(claimed) != 1 || claimed[0].ID != next {
		t.Fatalf("claimed %v, want the concurrency limit's next job %d", claimed, next)
	}
}

// finishClaimResult is what a FinishClaim returned.
type finishClaimResult struct {
	stale   []queue.Lease
	claimed []*queue.Job
	err     error
}

// frozenFinishClaim completes the running jobs, each asking for its
// partition's next job, through FinishClaim for worker "frozen" (lease
// lease), from a client frozen as soon as its batch is sent; it returns
// the freezer, the frozen session's server pid, and where FinishClaim's
// result comes once the client is thawed.
func frozenFinishClaim(t *testing.T, db *pgtest.DB, running []*queue.Job, lease time.Duration) (*sqlfreeze.Freezer, uint32, <-chan finishClaimResult) {
	t.Helper()
	a, fz := frozenClient(t, db)
	fz.Arm(sqlfreeze.Point{Match: mentions("SET state = 'completed', finalized_at = now()"), Sent: true, Batch: true})
	done := make(chan finishClaimResult, 1)
	go func() {
		fs := make([]queue.Finish, len(running))
		for i, j := range running {
			fs[i] = queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeComplete, Limit: j.Limit, LimitPartition: j.LimitPartition, ClaimNext: true}
		}
		stale, claimed, err := a.FinishClaim(context.Background(), fs, queue.FinishClaimParams{Lease: lease, WorkerID: "frozen"})
		done <- finishClaimResult{stale, claimed, err}
	}()
	return fz, fz.Frozen(t, freezeWithin), done
}

// TestFinishClaimsLimitedTasks: a batch that completes a workflow task
// under a concurrency limit and a plain job under another claims, in its
// round trip, the next job of each limit: the workflow's next task and
// the plain job's successor, running under a fence newer than the batch's
// jobs', their attempt counted. Before, a batch with a task in it granted
// after its commit and claimed nothing.
func TestFinishClaimsLimitedTasks(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	setLimit(t, c, pgqueue.Limit{Name: "lt", Queue: "lt", Concurrency: 1})
	setLimit(t, c, pgqueue.Limit{Name: "lp", Queue: "lp", Concurrency: 1})
	if _, err := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: "limited", Tasks: []queue.WorkflowTask{task("a", "lt"), task("b", "lt")}}); err != nil {
		t.Fatal(err)
	}
	plain := enqueueN(t, c, queue.EnqueueParams{Kind: "k", Queue: "lp"}, 2)
	if _, err := c.GrantWaiting(ctx, 100); err != nil {
		t.Fatal(err)
	}
	running := append(claim(t, c, "lt", 10, time.Minute), claim(t, c, "lp", 10, time.Minute)...)
	if len(running) != 2 || running[0].TaskName != "a" || running[1].ID != plain[0] {
		t.Fatalf("claimed %v, want task a and the first plain job", running)
	}
	fs := make([]queue.Finish, len(running))
	var fence int64
	for i, j := range running {
		fs[i] = queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeComplete, Workflow: j.WorkflowID != "",
			Limit: j.Limit, LimitPartition: j.LimitPartition, ClaimNext: true, Queue: j.Queue}
		fence = max(fence, j.Fence)
	}
	stale, next, err := c.FinishClaim(ctx, fs, queue.FinishClaimParams{Lease: time.Minute, WorkerID: "w"})
	if err != nil || len(stale) > 0 {
		t.Fatalf("FinishClaim = %v stale, %v", stale, err)
	}
	got := map[string]bool{}
	for _, j := range next {
		if j.State != queue.StateRunning || j.Attempt != 1 || j.Fence <= fence {
			t.Fatalf("claimed %+v, want running, attempt 1, a fence past %d", j, fence)
		}
		got[j.TaskName+fmt.Sprint(j.ID == plain[1])] = true
	}
	if len(next) != 2 || !got["bfalse"] || !got["true"] {
		t.Fatalf("the batch claimed %v, want task b and the second plain job", next)
	}
}
