package pgqueue_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/sqlfreeze"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// roomSlots is a worker's room to run jobs (queue.Slots): free slots per
// queue, the jobs filled into them, and the reservations not filled yet.
type roomSlots struct {
	// every, if not 0, is how long each slot takes to come free: Reserve
	// waits that long, then reserves one.
	every    time.Duration
	mu       sync.Mutex
	free     map[string]int
	jobs     []*queue.Job
	reserves int
	fills    int
	out      int
	over     int
}

func (s *roomSlots) Reserve(q string, n int) int {
	if s.every > 0 {
		time.Sleep(s.every)
		n = min(n, 1)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := min(n, s.free[q])
	s.free[q] -= k
	s.out += k
	if k > 0 {
		s.reserves++
	}
	return k
}

func (s *roomSlots) Fill(q string, n int, jobs []*queue.Job, until time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fills++
	s.out -= n
	if len(jobs) > n {
		s.over += len(jobs) - n
	}
	s.free[q] += n - len(jobs)
	s.jobs = append(s.jobs, jobs...)
}

// releaseClaimFanOut inserts, with a client whose release chunk is
// rangeChunk, a workflow whose rangeWidth tasks of queue "fan" depend on
// "root" (also of "fan"), and "sum" on all of them, with priority prio;
// it claims root and returns the client, its database, the workflow's ID
// and root.
func releaseClaimFanOut(t *testing.T, prio int) (*pgqueue.Client, *pgtest.DB, string, *queue.Job) {
	t.Helper()
	return releaseClaimFanOutOf(t, prio, rangeWidth)
}

// releaseClaimFanOutOf is releaseClaimFanOut with width dependents.
func releaseClaimFanOutOf(t *testing.T, prio, width int) (*pgqueue.Client, *pgtest.DB, string, *queue.Job) {
	t.Helper()
	c, db := newRangeClient(t)
	t.Cleanup(c.Close)
	p := queue.WorkflowParams{Name: "release-claim", Tasks: []queue.WorkflowTask{task("root", "fan")}}
	names := make([]string, width)
	for i := range names {
		names[i] = fmt.Sprintf("task-%03d", i)
		tk := task(names[i], "fan", "root")
		tk.Params.Priority = prio
		p.Tasks = append(p.Tasks, tk)
	}
	p.Tasks = append(p.Tasks, task("sum", "fan", names...))
	res, err := c.InsertWorkflow(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	root := claimOne(t, c, "fan")
	if root.TaskName != "root" || root.Dependents != width {
		t.Fatalf("claimed %q with %d dependents, want root with %d", root.TaskName, root.Dependents, width)
	}
	return c, db, res.ID, root
}

// completeClaiming completes root through FinishClaim with slots, and
// waits for the releases it left to run after the commit.
func completeClaiming(t *testing.T, c *pgqueue.Client, root *queue.Job, fence int64, slots *roomSlots) []queue.Lease {
	t.Helper()
	ctx := context.Background()
	l := root.Lease()
	l.Fence = fence
	stale, next, err := c.FinishClaim(ctx, []queue.Finish{{Lease: l, Outcome: queue.OutcomeComplete, Workflow: true,
		Queue: root.Queue, Dependents: root.Dependents}}, queue.FinishClaimParams{Lease: time.Minute, WorkerID: "room", Slots: slots})
	if err != nil {
		t.Fatal(err)
	}
	if len(next) != 0 {
		t.Fatalf("FinishClaim returned %d jobs of limit slots; the dependents go to the slots", len(next))
	}
	if err := c.WaitReleases(ctx); err != nil {
		t.Fatal(err)
	}
	slots.mu.Lock()
	defer slots.mu.Unlock()
	if slots.out != 0 || slots.reserves != slots.fills || slots.over != 0 {
		t.Fatalf("%d slots left reserved, %d reservations for %d fills, %d jobs past the slots reserved", slots.out, slots.reserves, slots.fills, slots.over)
	}
	return stale
}

// TestReleaseClaimsForTheWorker completes a fan-out's root through
// FinishClaim with room for fewer dependents than it has: its release
// and its ranges' claim no more than the room allows, each once, running
// under a fence newer than root's, their attempt counted and leased to
// the worker, and make the others available; the fan-in stays pending.
func TestReleaseClaimsForTheWorker(t *testing.T) {
	const room = 25
	c, db, id, root := releaseClaimFanOut(t, 1)
	slots := &roomSlots{free: map[string]int{"fan": room}}
	if stale := completeClaiming(t, c, root, root.Fence, slots); len(stale) != 0 {
		t.Fatalf("stale: %v", stale)
	}
	// The completion's own release claims its whole chunk; the ranges
	// claim into the rest of the room as they find it reserved, which a
	// range that waited past its hold may have released whole meanwhile.
	claimed := len(slots.jobs)
	if claimed < rangeChunk || claimed > room {
		t.Fatalf("the releases claimed %d dependents for room for %d; want the first %d at least", claimed, room, rangeChunk)
	}
	seen := map[int64]bool{}
	for _, j := range slots.jobs {
		if seen[j.ID] {
			t.Fatalf("job %d claimed twice", j.ID)
		}
		seen[j.ID] = true
		if j.State != queue.StateRunning || j.Attempt != 1 || j.Fence <= root.Fence || j.Queue != "fan" ||
			j.AttemptedBy[len(j.AttemptedBy)-1] != "room" || time.Until(j.LeaseExpiresAt) < 30*time.Second {
			t.Fatalf("claimed %+v, want running, attempt 1, a fence past root's %d, attempted by room, leased a minute", j, root.Fence)
		}
	}
	var running, available, pending, ranges int
	if err := db.Pool.QueryRow(context.Background(), `
SELECT count(*) FILTER (WHERE state = 'running' AND task_name <> 'root'), count(*) FILTER (WHERE state = 'available'),
       count(*) FILTER (WHERE state = 'pending'), (SELECT count(*) FROM jobfence_releases)
FROM jobfence_jobs WHERE workflow_id = $1`, id).Scan(&running, &available, &pending, &ranges); err != nil {
		t.Fatal(err)
	}
	if running != claimed || available != rangeWidth-claimed || pending != 1 || ranges != 0 {
		t.Fatalf("%d running, %d available, %d pending, %d ranges left; want %d, %d, 1 (sum), 0",
			running, available, pending, ranges, claimed, rangeWidth-claimed)
	}
	t.Logf("%d of %d dependents claimed, with room for %d", claimed, rangeWidth, room)
}

// TestReleaseClaimsOnlyWhatAClaimWould: a release claims nothing from a
// paused queue, nothing ahead of an available job of a higher priority,
// and a stale completion (a zombie's) releases and claims nothing; every
// slot reserved comes back.
func TestReleaseClaimsOnlyWhatAClaimWould(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		prio int
		// before readies the case, given the client.
		before func(*pgqueue.Client) error
	}{
		{"paused queue", 1, func(c *pgqueue.Client) error { return c.PauseQueue(ctx, "fan", "test") }},
		{"higher priority waiting", 2, func(c *pgqueue.Client) error {
			_, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: "fan", Priority: 1})
			return err
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, _, id, root := releaseClaimFanOut(t, tt.prio)
			if err := tt.before(c); err != nil {
				t.Fatal(err)
			}
			slots := &roomSlots{free: map[string]int{"fan": 100}}
			completeClaiming(t, c, root, root.Fence, slots)
			if len(slots.jobs) != 0 {
				t.Fatalf("claimed %d dependents", len(slots.jobs))
			}
			if n := states(t, c, id); countState(n, queue.StateAvailable) != rangeWidth {
				t.Fatalf("states %v, want the %d dependents available", n, rangeWidth)
			}
		})
	}
	t.Run("stale completion", func(t *testing.T) {
		c, _, id, root := releaseClaimFanOut(t, 1)
		slots := &roomSlots{free: map[string]int{"fan": 100}}
		if stale := completeClaiming(t, c, root, root.Fence-1, slots); len(stale) != 1 {
			t.Fatalf("stale %v, want the completion under an old fence", stale)
		}
		if len(slots.jobs) != 0 {
			t.Fatalf("a stale completion claimed %d dependents", len(slots.jobs))
		}
		if n := states(t, c, id); countState(n, queue.StatePending) != rangeWidth+1 {
			t.Fatalf("states %v, want every dependent pending", n)
		}
	})
}

// countState counts the tasks in state s.
func countState(states map[string]queue.State, s queue.State) int {
	n := 0
	for _, v := range states {
		if v == s {
			n++
		}
	}
	return n
}

// TestRangesLeaveASlowWorker: a worker whose slots come free one at a
// time, each within the hold a range waits for one, gets the ranges'
// dependents one by one for a second at most after its completion; the
// ranges left then are released whole, for the fleet.
func TestRangesLeaveASlowWorker(t *testing.T) {
	// Enough entries in ranges that they outlast the window while the
	// slots below free one at a time for each of the client's
	// releaseWorkers. The completion's
	// own release claims one dependent of its first rangeChunk and makes
	// the others available.
	const width = 600
	c, db, id, root := releaseClaimFanOutOf(t, 1, width)
	slots := &roomSlots{free: map[string]int{"fan": width}, every: 10 * time.Millisecond}
	start := time.Now()
	completeClaiming(t, c, root, root.Fence, slots)
	var available int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM jobfence_jobs WHERE workflow_id = $1 AND state = 'available'`, id).Scan(&available); err != nil {
		t.Fatal(err)
	}
	if available <= rangeChunk-1 || available+len(slots.jobs) != width {
		t.Fatalf("%d claimed and %d available of %d dependents; want the ranges past the window available", len(slots.jobs), available, width)
	}
	t.Logf("%d claimed, %d released for the fleet, in %v", len(slots.jobs), available, time.Since(start).Round(time.Millisecond))
}

// TestFrozenWorkerReleaseClaimCommits: a worker frozen as soon as it has
// sent the completion of a fan-out's root, whose release claims the
// chunk's 1,000 dependents for it, holds none of their rows: the reply
// (the claim's summary, no job's row) fits in the sockets' buffers, so
// the batch commits without the worker, and the worker gets the jobs once
// thawed.
func TestFrozenWorkerReleaseClaimCommits(t *testing.T) {
	const width = pgqueue.DefaultReleaseChunk
	c, db := newClient(t)
	ctx := context.Background()
	p := queue.WorkflowParams{Name: "frozen-release", Tasks: []queue.WorkflowTask{task("root", "fan")}}
	for i := range width {
		p.Tasks = append(p.Tasks, task(fmt.Sprintf("task-%04d", i), "fan", "root"))
	}
	id, err := c.InsertWorkflow(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	root := claimOne(t, c, "fan")
	a, fz := frozenClient(t, db)
	fz.Arm(sqlfreeze.Point{Match: mentions("SET state = 'completed', finalized_at = now()"), Sent: true, Batch: true})
	slots := &roomSlots{free: map[string]int{"fan": width}}
	done := make(chan error, 1)
	go func() {
		_, _, err := a.FinishClaim(ctx, []queue.Finish{{Lease: root.Lease(), Outcome: queue.OutcomeComplete, Workflow: true,
			Queue: root.Queue, Dependents: root.Dependents}}, queue.FinishClaimParams{Lease: time.Minute, WorkerID: "frozen", Slots: slots})
		done <- err
	}()
	pid := fz.Frozen(t, freezeWithin)
	testwatch.WaitFor(t, freezeWithin, "the frozen worker's batch to commit the root and claim its dependents", func() bool {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE workflow_id = $1 AND state = 'running' AND 'frozen' = ANY(attempted_by)`,
			id.ID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == width
	})
	sqlfreeze.WaitIdle(t, db.Pool, pid, freezeWithin)
	fz.Thaw()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	slots.mu.Lock()
	defer slots.mu.Unlock()
	if len(slots.jobs) != width || slots.out != 0 {
		t.Fatalf("the thawed worker got %d jobs, %d slots left reserved; want %d, none", len(slots.jobs), slots.out, width)
	}
}
