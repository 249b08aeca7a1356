package pgqueue_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// TestClaimRefusesPausedQueue: the claim itself refuses a paused queue, so
// no claim that starts after PauseQueue commits takes a job, whatever its
// worker believes. Four claimers burn down a backlog at full speed; 50
// times in a row the queue is paused and ten jobs of a higher priority
// (the next claim's first pick) are inserted after the pause, and none of
// those ten is claimed while it stays paused.
func TestClaimRefusesPausedQueue(t *testing.T) {
	c, db := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	backlog := make([]queue.EnqueueParams, 50000)
	for i := range backlog {
		backlog[i] = queue.EnqueueParams{Kind: "k", Priority: 4}
	}
	if _, err := c.EnqueueMany(ctx, backlog); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var claimers sync.WaitGroup
	defer claimers.Wait()
	defer close(stop)
	for range 4 {
		claimers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := c.Claim(ctx, queue.ClaimParams{Queue: queue.DefaultQueue, Limit: 20, Lease: time.Minute, WorkerID: "w"}); err != nil && ctx.Err() == nil {
					t.Error(err)
					return
				}
			}
		})
	}
	markers := make([]queue.EnqueueParams, 10)
	for i := range markers {
		markers[i] = queue.EnqueueParams{Kind: "marker", Priority: 1}
	}
	for round := range 50 {
		if err := c.ResumeQueue(ctx, queue.DefaultQueue, "test"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // claims at full speed
		if err := c.PauseQueue(ctx, queue.DefaultQueue, "test"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.EnqueueMany(ctx, markers); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Millisecond) // claims keep coming
		var claimed int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE kind = 'marker' AND state <> 'available'`).Scan(&claimed); err != nil {
			t.Fatal(err)
		}
		if claimed > 0 {
			t.Fatalf("round %d: %d jobs inserted after the pause were claimed", round, claimed)
		}
		if _, err := db.Pool.Exec(ctx, `DELETE FROM jobfence_jobs WHERE kind = 'marker'`); err != nil {
			t.Fatal(err)
		}
	}
	var left int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE state = 'available'`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left == 0 {
		t.Fatal("the backlog ran out: the claims were not at full speed throughout")
	}
}
