package pgqueue_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestClaimsTakeTurns: while another claim of the queue holds its turn (an
// open transaction holding the queue's advisory lock, as a claim in flight
// does), a claim waits, and it claims once that transaction ends; with
// ConcurrentClaims it does not wait.
func TestClaimsTakeTurns(t *testing.T) {
	c, db := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 3 {
		if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, pgqueue.ClaimTurnSQL, "default", 0); err != nil {
		t.Fatal(err)
	}
	done := make(chan []*queue.Job, 1)
	go func() {
		jobs, err := c.Claim(ctx, queue.ClaimParams{Queue: "default", Limit: 1, Lease: time.Minute, WorkerID: "w"})
		if err != nil {
			t.Error(err)
		}
		done <- jobs
	}()
	select {
	case jobs := <-done:
		t.Fatalf("claim returned %d jobs while another held the queue's turn, want it to wait", len(jobs))
	case <-time.After(300 * time.Millisecond):
	}

	concurrent := pgqueue.New(db.Pool, pgqueue.Config{ConcurrentClaims: true})
	if jobs := claim(t, concurrent, "default", 1, time.Minute); len(jobs) != 1 {
		t.Fatalf("claim with ConcurrentClaims took %d jobs while the turn was held, want 1 at once", len(jobs))
	}

	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case jobs := <-done:
		if len(jobs) != 1 {
			t.Fatalf("claim after its turn came took %d jobs, want 1", len(jobs))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("claim still waiting 10 s after the turn was given back")
	}
}
