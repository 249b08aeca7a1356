package testwatch

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestHungChild is the test TestBoundNamesTheHungTest runs in a child
// process; it hangs past its bound.
func TestHungChild(t *testing.T) {
	if os.Getenv("TESTWATCH_CHILD") == "" {
		t.Skip("run by TestBoundNamesTheHungTest")
	}
	Bound(t, 50*time.Millisecond)
	time.Sleep(time.Minute)
}

func TestBoundNamesTheHungTest(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHungChild$", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), "TESTWATCH_CHILD=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("child: %v; want exit status 3", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("child ran %v; want it ended soon after its 50ms bound", d)
	}
	out := strings.TrimSpace(stderr.String())
	if !strings.HasSuffix(out, "FAIL TestHungChild: still running after 50ms (stacks above)") ||
		!strings.Contains(out, "goroutine ") {
		t.Fatalf("child's stderr does not end with the goroutine stacks and the test's name:\n%s", out[max(0, len(out)-500):])
	}
}

func TestBoundStopsWhenTheTestEnds(t *testing.T) {
	t.Run("quick", func(t *testing.T) { Bound(t, 100*time.Millisecond) })
	time.Sleep(300 * time.Millisecond) // the process is still here: the bound was lifted
}
