package pgqueue

import (
	"strings"
	"testing"
	"time"
)

// TestClaimPace: the interval between claims from the queue's start grows
// with slow claims (a fleet's, on a busy server) and never falls below
// headIntervalMin; a short claim's retry from the start follows the claims'
// duration; a client's claims that run at once take turns of their own.
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

	// The retry from the start after a short claim follows the claims'
	// duration, within its bounds.
	for _, c := range []struct{ took, want time.Duration }{
		{0, headRetryMin},
		{500 * time.Microsecond, headRetryMin},
		{3 * time.Millisecond, 6 * time.Millisecond},
		{300 * time.Millisecond, headRetryMax},
	} {
		p.claimed(c.took)
		if got := p.headRetryInterval(); got != c.want {
			t.Fatalf("retry interval after a claim of %v: %v, want %v", c.took, got, c.want)
		}
	}

	a, _ := p.turn()
	b, _ := p.turn()
	if a != 0 || b != 1 {
		t.Fatalf("two claims at once took turns %d and %d, want 0 and 1", a, b)
	}
	if c, own := p.turn(); own {
		t.Fatalf("a third claim at once took turn %d of its own, want none of its own", c)
	}
	p.done(a)
	if c, _ := p.turn(); c != 0 {
		t.Fatalf("a claim after turn 0 was given back took turn %d, want 0", c)
	}
}

// TestClaimReplyNullsMatchJobColumns: the claim's first reply row pads the
// job columns with one NULL each, written out by hand; a column added to
// jobColumns without a NULL here would shift every small claim's reply.
func TestClaimReplyNullsMatchJobColumns(t *testing.T) {
	cols := strings.Count(jobColumns, ",") + 1
	nulls := strings.Count(claimReplyNulls, "NULL")
	if cols != nulls {
		t.Fatalf("jobColumns has %d columns, claimReplyNulls %d NULLs", cols, nulls)
	}
}
