package pgqueue

import (
	"testing"
	"time"
)

// TestClaimPace: the interval between claims from the queue's start grows
// with slow claims (a fleet's, on a busy server) and never falls below
// 250 ms.
func TestClaimPace(t *testing.T) {
	var p claimPace
	if got := p.headInterval(); got != headIntervalMin {
		t.Fatalf("interval before any claim %v, want %v", got, headIntervalMin)
	}
	p.claimed(time.Millisecond)
	if got := p.headInterval(); got != headIntervalMin {
		t.Fatalf("interval after a quick claim %v, want %v", got, headIntervalMin)
	}
	p.claimed(300 * time.Millisecond)
	if got := p.headInterval(); got != 1200*time.Millisecond {
		t.Fatalf("interval after a claim of 300 ms %v, want 1.2s", got)
	}

}
