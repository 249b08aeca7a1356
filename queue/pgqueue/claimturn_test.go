package pgqueue_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestClaimTurnWaitIsBounded: while another session holds a queue's claim
// turn (an open transaction holding its advisory lock, as a claim in
// flight whose server session is stuck would), a claim waits for the turn
// at most about a second, then claims beside the holder; with the turn
// free it does not wait.
func TestClaimTurnWaitIsBounded(t *testing.T) {
	c, db := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 5 {
		if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, pgqueue.ClaimTurnSQL, queue.DefaultQueue, 0); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	jobs := claim(t, c, queue.DefaultQueue, 1, time.Minute)
	waited := time.Since(began)
	if len(jobs) != 1 {
		t.Fatalf("claim while the turn was held took %d jobs, want 1", len(jobs))
	}
	if waited < 900*time.Millisecond || waited > 5*time.Second {
		t.Fatalf("claim while the turn was held returned after %v, want about a second (its turn's wait)", waited)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// The quickest of three claims: one that waited for the turn would
	// wait every time, a load spike on a busy machine slows one.
	quickest := time.Hour
	for range 3 {
		began = time.Now()
		if jobs := claim(t, c, queue.DefaultQueue, 1, time.Minute); len(jobs) != 1 {
			t.Fatalf("claim with the turn free took %d jobs, want 1", len(jobs))
		}
		quickest = min(quickest, time.Since(began))
	}
	if quickest > 900*time.Millisecond {
		t.Fatalf("the quickest of three claims with the turn free took %v, want no wait", quickest)
	}
}
