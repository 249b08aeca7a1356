package pgqueue_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// TestClaimCursor: claims from a backlog start after the jobs claimed
// before, and a job that sorts before that point is still claimed: at once
// when the rest of the queue is taken, and otherwise within the cursor's
// interval.
func TestClaimCursor(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	enqueue := func(n, priority int) []int64 {
		t.Helper()
		ids := make([]int64, n)
		for i := range ids {
			r, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Priority: priority})
			if err != nil {
				t.Fatal(err)
			}
			ids[i] = r.ID
		}
		return ids
	}
	ids := enqueue(40, 2)
	if got := claim(t, c, "default", 10, time.Minute); len(got) != 10 || got[9].ID != ids[9] {
		t.Fatalf("first claim: %d jobs, want the backlog's first 10", len(got))
	}

	// An urgent job sorts before the cursor: the next claim, started
	// after the cursor, passes over it.
	urgent := enqueue(1, 1)[0]
	got := claim(t, c, "default", 10, time.Minute)
	if len(got) != 10 || got[0].ID != ids[10] {
		t.Fatalf("second claim: %d jobs starting at %d, want 10 from %d (after the cursor)", len(got), got[0].ID, ids[10])
	}
	// Within the interval, a claim reads from the start again.
	time.Sleep(300 * time.Millisecond)
	got = claim(t, c, "default", 10, time.Minute)
	if len(got) != 10 || got[0].ID != urgent {
		t.Fatalf("claim after the interval took %d jobs starting at %d, want the urgent job %d first", len(got), got[0].ID, urgent)
	}

	// The cursor stands at the queue's end; a claim that finds too little
	// after it looks before it in the same call.
	if rest := claim(t, c, "default", 100, time.Minute); len(rest) != 11 {
		t.Fatalf("draining claim took %d jobs, want the 11 left", len(rest))
	}
	more := enqueue(2, 2)
	if got := claim(t, c, "default", 1, time.Minute); len(got) != 1 || got[0].ID != more[0] {
		t.Fatalf("claim of 1 took %d jobs, want job %d", len(got), more[0])
	}
	late := enqueue(1, 1)[0]
	got = claim(t, c, "default", 2, time.Minute)
	if len(got) != 2 || got[0].ID != more[1] || got[1].ID != late {
		t.Fatalf("claim of 2 took %d jobs, want job %d after the cursor and the late job %d before it", len(got), more[1], late)
	}
}
