package freeze_test

import (
	"bufio"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/freeze"
)

// TestSelf: the child prints "frozen", freezes, and prints "after" only
// once continued; while stopped it prints nothing.
func TestSelf(t *testing.T) {
	if os.Getenv("FREEZE_CHILD") != "" {
		os.Stdout.WriteString("frozen\n")
		freeze.Self()
		os.Stdout.WriteString("after\n")
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSelf$")
	cmd.Env = append(os.Environ(), "FREEZE_CHILD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	lines := make(chan string, 4)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	if l := <-lines; l != "frozen" {
		t.Fatalf("child said %q", l)
	}
	select {
	case l := <-lines:
		t.Fatalf("child said %q while it should be frozen", l)
	case <-time.After(500 * time.Millisecond):
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-lines:
		if l != "after" {
			t.Fatalf("continued child said %q", l)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("child did not go on after SIGCONT")
	}
}
