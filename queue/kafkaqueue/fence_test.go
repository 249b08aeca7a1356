package kafkaqueue

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
)

// TestPausedMemberIsFenced freezes a member's network in the middle of a job
// for longer than its session timeout, as a stopped process would be. Its
// partitions move, the new owner applies the job's effect under a higher
// generation, and the paused member's late write is rejected by the fence.
// With SyncCommit its Finish is reported stale (the broker refuses its
// commit); either way it learns that it lost the job.
func TestPausedMemberIsFenced(t *testing.T) {
	for _, sync := range []bool{true, false} {
		t.Run(fmt.Sprintf("SyncCommit=%v", sync), func(t *testing.T) { testPausedMember(t, sync) })
	}
}

func testPausedMember(t *testing.T, syncCommit bool) {
	db := pgtest.New(t)
	setupEffects(t, db.Pool)
	topic := uniqueName("jobs")
	c := newCluster(t, 2, topic)
	cl := newTestClient(t, c)
	group := uniqueName("g")
	cfg := c.config(group, topic)
	cfg.SessionTimeout = 2 * time.Second
	cfg.SyncCommit = syncCommit
	if c.Real {
		cfg.SessionTimeout = 6 * time.Second // the broker's usual minimum
	}

	var p pauser
	// A failure while paused must not leave the zombie frozen: its Close
	// (a cleanup) would wait on the network for ever.
	defer p.resume()
	zombieCfg := cfg
	zombieCfg.Dialer = p.dialer()
	type held struct {
		job  *queue.Job
		done chan effectResult
	}
	heldCh := make(chan held, 1)
	release := make(chan struct{})
	var once sync.Once
	zombiePool := db.NewPool(t, 4)
	zombie := startMember(t, "zombie", zombieCfg, topic, 4, func(ctx context.Context, j *queue.Job) queue.Finish {
		first := false
		once.Do(func() { first = true })
		if first {
			h := held{job: j, done: make(chan effectResult, 1)}
			heldCh <- h
			<-release // paused: it sees neither its context nor the rebalance
			res, err := writeEffect(context.Background(), zombiePool, j, "zombie")
			if err != nil {
				t.Errorf("zombie write: %v", err)
			}
			h.done <- res
			return queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeComplete}
		}
		if _, err := writeEffect(ctx, zombiePool, j, "zombie"); err != nil {
			return queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeRetry, Error: &queue.AttemptError{Error: err.Error()}}
		}
		return queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeComplete}
	})
	defer close(release)
	testwatch.WaitFor(t, time.Minute, "the zombie to own the partitions", func() bool {
		return len(zombie.b.Assignment().Partitions[topic]) == 2
	})
	livePool := db.NewPool(t, 4)
	live := startMember(t, "live", cfg, topic, 4, func(ctx context.Context, j *queue.Job) queue.Finish {
		if _, err := writeEffect(ctx, livePool, j, "live"); err != nil {
			return queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeRetry, Error: &queue.AttemptError{Error: err.Error()}}
		}
		return queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeComplete}
	})
	testwatch.WaitFor(t, time.Minute, "the members to share the partitions", func() bool {
		za, la := zombie.b.Assignment(), live.b.Assignment()
		return za.Generation == la.Generation && len(za.Partitions[topic]) == 1 && len(la.Partitions[topic]) == 1
	})

	const jobs = 20
	var batch []EnqueueJob
	for i := range jobs {
		batch = append(batch, EnqueueJob{
			Params:       queue.EnqueueParams{Queue: topic, Kind: "effect", Args: fmt.Appendf(nil, `{"seq":%d}`, i)},
			PartitionKey: fmt.Sprintf("k%d", i),
		})
	}
	if err := cl.EnqueueMany(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	var h held
	select {
	case h = <-heldCh:
	case <-time.After(time.Minute):
		t.Fatal("the zombie claimed no job")
	}
	p.pause()
	t.Logf("zombie paused holding %s under fence %d", h.job.Key, h.job.Fence)

	var liveFence int64
	testwatch.WaitFor(t, 2*time.Minute, "the live member to apply the held job under a newer fence", func() bool {
		live.checkErrs(t)
		err := db.Pool.QueryRow(context.Background(), `SELECT fence FROM effects WHERE msg_key = $1`, h.job.Key).Scan(&liveFence)
		return err == nil && liveFence > h.job.Fence
	})
	p.resume()
	release <- struct{}{}
	if res := <-h.done; res != effectRejected {
		t.Fatalf("the zombie's late write under fence %d was applied (result %d) over fence %d", h.job.Fence, res, liveFence)
	}
	var fence int64
	var owner string
	if err := db.Pool.QueryRow(context.Background(), `SELECT fence, member FROM effects WHERE msg_key = $1`, h.job.Key).Scan(&fence, &owner); err != nil {
		t.Fatal(err)
	}
	if fence < liveFence || owner == "zombie" {
		t.Fatalf("effect of %s: fence %d by %s after the zombie's write; want fence >= %d by live", h.job.Key, fence, owner, liveFence)
	}
	if syncCommit {
		testwatch.WaitFor(t, time.Minute, "the zombie's Finish to be stale", func() bool { return zombie.stale.Load() >= 1 })
	}
	testwatch.WaitFor(t, time.Minute, "the zombie to learn it lost the job", func() bool {
		lost, err := zombie.b.Heartbeat(context.Background(), []queue.Lease{h.job.Lease()}, time.Minute)
		return err == nil && len(lost) == 1 && zombie.b.Assignment().Generation != h.job.Fence
	})
	testwatch.WaitFor(t, time.Minute, "every effect", func() bool {
		rows, _ := countEffects(t, db.Pool)
		return rows == jobs
	})
	waitCommitted(t, c, group, topic, 2)
	rows, seqs := countEffects(t, db.Pool)
	if rows != jobs || seqs != jobs {
		t.Fatalf("effects: %d rows for %d jobs, want %d", rows, seqs, jobs)
	}
}
