package testwatch

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// fatalTB records the message of Fatalf, which ends its goroutine as
// testing.T's does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestWaitFor: WaitFor returns as soon as the condition holds, and fails
// the test, naming what it waited for, once the timeout has passed.
func TestWaitFor(t *testing.T) {
	calls := 0
	WaitFor(t, time.Minute, "the third call", func() bool { calls++; return calls == 3 })
	if calls != 3 {
		t.Fatalf("condition called %d times, want 3", calls)
	}

	f := &fatalTB{TB: t}
	done := make(chan struct{})
	began := time.Now()
	go func() {
		defer close(done)
		WaitFor(f, 100*time.Millisecond, "nothing", func() bool { return false })
	}()
	<-done
	if want := "timed out after 100ms waiting for nothing"; f.msg != want {
		t.Errorf("failed with %q, want %q", f.msg, want)
	}
	if took := time.Since(began); took < 100*time.Millisecond || took > 10*time.Second {
		t.Errorf("gave up after %v, want just over 100ms", took)
	}
}
