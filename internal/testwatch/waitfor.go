package testwatch

import (
	"testing"
	"time"
)

// WaitFor polls cond every 20 ms until it holds, and fails t, saying what
// it waited for, once timeout has passed without it.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
