package cpuclock_test

import (
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/cpuclock"
)

// TestProcessCounts checks that busy work shows as CPU time and sleeping
// does not.
func TestProcessCounts(t *testing.T) {
	// Busy work until the clock has counted 20 ms of CPU: on a loaded
	// machine a fixed stretch of wall time may get little CPU, so the
	// bound is on the wall time it may take (a clock that does not count
	// never gets there).
	c0 := cpuclock.Process()
	deadline := time.Now().Add(30 * time.Second)
	c1 := c0
	for x := 0; c1-c0 < 20*time.Millisecond; x++ {
		_ = x * x
		if x%100_000 == 0 {
			c1 = cpuclock.Process()
			if time.Now().After(deadline) {
				t.Fatalf("30 s of busy work: %v of CPU time", c1-c0)
			}
		}
	}
	// Asleep, the process uses a sliver of a core: the clock counts CPU,
	// not the wall time that passes.
	w := time.Now()
	time.Sleep(200 * time.Millisecond)
	c2 := cpuclock.Process()
	if slept := time.Since(w); c2-c1 >= slept {
		t.Fatalf("%v asleep: %v of CPU time", slept, c2-c1)
	}
}
