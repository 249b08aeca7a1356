package pgqueue

import (
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// TestClaimCursorSlowClaims: when claims are slow (a fleet's claims on a
// busy server), the interval between claims from the start grows with
// them, so claims do not all read from the start.
func TestClaimCursorSlowClaims(t *testing.T) {
	var c claimCursor
	t0 := time.Now()
	full := []*queue.Job{{ID: 1}, {ID: 2}}
	if after, _ := c.start(t0); after {
		t.Fatal("first claim started after a cursor it has not got")
	}
	c.claimed(full, 2, 300*time.Millisecond)
	// 300 ms after the full claim: past the 250 ms floor, within four
	// claims' time.
	if after, from := c.start(t0.Add(300 * time.Millisecond)); !after || from.id != 2 {
		t.Fatalf("claim 300 ms after a claim that took 300 ms: after %v from %d, want after job 2", after, from.id)
	}
	c.claimed(full, 2, 300*time.Millisecond)
	if after, _ := c.start(t0.Add(1300 * time.Millisecond)); after {
		t.Fatal("claim four claims' time after the last full one started after the cursor, want from the start")
	}
	// Quick claims keep the 250 ms floor.
	c.claimed(full, 2, time.Millisecond)
	t1 := t0.Add(1300 * time.Millisecond)
	if after, _ := c.start(t1.Add(100 * time.Millisecond)); !after {
		t.Fatal("claim 100 ms after a full one read from the start, want after the cursor")
	}
	c.claimed(full, 2, time.Millisecond)
	if after, _ := c.start(t1.Add(260 * time.Millisecond)); after {
		t.Fatal("claim 260 ms after a full one started after the cursor, want from the start")
	}
}
