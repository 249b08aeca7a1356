package cpuclock_test

import (
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/cpuclock"
)

// TestProcessCounts checks that busy work shows as CPU time and sleeping
// does not.
func TestProcessCounts(t *testing.T) {
	c0 := cpuclock.Process()
	deadline := time.Now().Add(50 * time.Millisecond)
	for x := 0; time.Now().Before(deadline); x++ {
		_ = x * x
	}
	c1 := cpuclock.Process()
	if c1-c0 < 10*time.Millisecond {
		t.Fatalf("50 ms of busy work: %v of CPU time", c1-c0)
	}
	time.Sleep(100 * time.Millisecond)
	if c2 := cpuclock.Process(); c2-c1 > 50*time.Millisecond {
		t.Fatalf("100 ms asleep: %v of CPU time", c2-c1)
	}
}
