package idempotency_test

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// child is this test binary re-executed to play one part of a test in a
// process of its own, which the test can stop and resume with signals. env
// names the part (TestMain runs it instead of the tests).
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr bytes.Buffer
	exited chan struct{}
}

// startChild starts the part env on the database at databaseURL. The child
// is resumed and killed when the test ends, unless wait saw it exit.
func startChild(t *testing.T, env, databaseURL string) *child {
	t.Helper()
	c := &child{
		cmd:    exec.Command(os.Args[0], "-test.run=^$"),
		lines:  make(chan string, 8),
		exited: make(chan struct{}),
	}
	c.cmd.Env = append(os.Environ(), env+"=1", "DATABASE_URL="+databaseURL)
	c.cmd.Stderr = &c.stderr
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
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

// signal sends sig to the child.
func (c *child) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// next returns the child's next line of output.
func (c *child) next(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			t.Fatalf("child closed its stdout early (stderr %s)", c.stderr.String())
		}
		return l
	case <-time.After(time.Minute):
		t.Fatal("no line from the child within a minute")
	}
	return ""
}

// wait waits for the child to exit and returns its exit error.
func (c *child) wait() error {
	err := c.cmd.Wait()
	close(c.exited)
	return err
}
