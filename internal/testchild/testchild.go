// Package testchild re-executes a test binary to play one part of a test
// in a process of its own, which the test can then stop and continue with
// signals (a frozen lease holder, a paused owner) or kill.
//
// The part is chosen by an environment variable that the package's TestMain
// looks at before running any test:
//
//	func TestMain(m *testing.M) {
//		if os.Getenv(frozenEnv) != "" {
//			os.Exit(frozenMain())
//		}
//		pgtest.Main(m)
//	}
package testchild

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/logbuf"
)

// LineTimeout bounds how long Next waits for a line.
const LineTimeout = time.Minute

// Child is a running part. Its standard output is read line by line with
// Next; its standard error is kept for failure messages.
type Child struct {
	// Stdin is the child's standard input.
	Stdin io.WriteCloser

	cmd    *exec.Cmd
	lines  chan string
	stderr logbuf.Buffer
	exited chan struct{}
}

// Start runs this test binary again with env=1 and the extra environment
// entries ("KEY=value"), and no test selected, so that TestMain runs the
// part. The child is continued and killed when the test ends, unless Wait
// saw it exit.
func Start(t testing.TB, env string, extra ...string) *Child {
	t.Helper()
	c := &Child{
		cmd:    exec.Command(os.Args[0], "-test.run=^$"),
		lines:  make(chan string, 16),
		exited: make(chan struct{}),
	}
	c.cmd.Env = append(append(os.Environ(), env+"=1"), extra...)
	c.cmd.Stderr = &c.stderr
	var err error
	if c.Stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-c.exited:
		default:
			_ = c.cmd.Process.Signal(syscall.SIGCONT)
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Wait()
		}
	})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	return c
}

// Signal sends sig to the child.
func (c *Child) Signal(t testing.TB, sig os.Signal) {
	t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// Next returns the child's next line of output, failing the test if none
// comes within LineTimeout.
func (c *Child) Next(t testing.TB) string {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			t.Fatalf("child closed its stdout early (stderr %s)", c.Stderr())
		}
		return l
	case <-time.After(LineTimeout):
		t.Fatalf("no line from the child within %s (stderr %s)", LineTimeout, c.Stderr())
	}
	return ""
}

// Quiet reports whether the child printed nothing for d (a frozen child
// must not).
func (c *Child) Quiet(d time.Duration) (line string, quiet bool) {
	select {
	case l, ok := <-c.lines:
		if !ok {
			return "(stdout closed)", false
		}
		return l, false
	case <-time.After(d):
		return "", true
	}
}

// Wait waits for the child to exit and returns its exit error.
func (c *Child) Wait() error {
	err := c.cmd.Wait()
	close(c.exited)
	return err
}

// Stderr returns what the child wrote to its standard error so far.
func (c *Child) Stderr() string { return c.stderr.String() }
