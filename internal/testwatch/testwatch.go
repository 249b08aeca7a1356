// Package testwatch bounds how long a test may run, so that a hang in a test
// or its cleanups fails under the test's own name within minutes instead of
// stalling the whole package until go test's -timeout, whose report names
// the test only at the top of a long goroutine dump. WaitFor bounds a wait
// inside a test the same way: it fails the test, saying what it waited
// for, rather than let it hang.
package testwatch

import (
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"
)

// Bound ends the test binary when t, cleanups included, is still running
// after limit: it prints every goroutine's stack to stderr and then, as the
// last line, t's name, and exits with status 3. Call it first in a test (or
// a helper the test calls first) so that its own cleanup runs last.
func Bound(t testing.TB, limit time.Duration) {
	timer := time.AfterFunc(limit, func() {
		buf := make([]byte, 64<<20)
		n := runtime.Stack(buf, true)
		os.Stderr.Write(buf[:n])
		fmt.Fprintf(os.Stderr, "\nFAIL %s: still running after %v (stacks above)\n", t.Name(), limit)
		os.Exit(3)
	})
	t.Cleanup(func() { timer.Stop() })
}
