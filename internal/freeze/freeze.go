// Package freeze stops the calling process the way a paused VM or a
// SIGSTOP from outside would, for tests of frozen lease holders.
package freeze

import (
	"os"
	"os/signal"
	"syscall"
)

// Self stops the process with SIGSTOP and returns once it has been
// continued (SIGCONT). A signal a process sends itself is delivered
// asynchronously: without waiting for the continue, the caller could run
// on for a moment (and commit what the test means to freeze before).
func Self() {
	cont := make(chan os.Signal, 1)
	signal.Notify(cont, syscall.SIGCONT)
	defer signal.Stop(cont)
	_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	<-cont
}
