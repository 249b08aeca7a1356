package freeze_test

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/freeze"
	"github.com/jobfence/jobfence/internal/testchild"
)

const childEnv = "FREEZE_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		fmt.Println("frozen")
		freeze.Self()
		fmt.Println("after")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestSelf: the child prints "frozen", freezes, and prints "after" only
// once continued; while stopped it prints nothing.
func TestSelf(t *testing.T) {
	c := testchild.Start(t, childEnv)
	if l := c.Next(t); l != "frozen" {
		t.Fatalf("child said %q", l)
	}
	if l, quiet := c.Quiet(500 * time.Millisecond); !quiet {
		t.Fatalf("child said %q while it should be frozen", l)
	}
	c.Signal(t, syscall.SIGCONT)
	if l, err := c.Next(t), c.Wait(); l != "after" || err != nil {
		t.Fatalf("continued child said %q and exited with %v", l, err)
	}
}
