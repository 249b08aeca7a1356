package main

import (
	"bytes"
	"io"
	"sync"

	"github.com/jobfence/jobfence/queue/pgqueue"
)

// redactingWriter passes whole lines to w with their passwords removed by
// a pgqueue.Redactor: every byte a command prints goes through one, so no
// flag default, log line or error can show a password. It buffers a line
// until its newline (a password must not be split across two writes) and
// is safe for concurrent use, as a demo's goroutines print at once.
type redactingWriter struct {
	mu     sync.Mutex
	w      io.Writer
	redact *pgqueue.Redactor
	line   []byte
}

// newRedactingWriter returns a redactingWriter that removes what redact
// removes.
func newRedactingWriter(w io.Writer, redact *pgqueue.Redactor) *redactingWriter {
	return &redactingWriter{w: w, redact: redact}
}

func (r *redactingWriter) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.line = append(r.line, p...)
	i := bytes.LastIndexByte(r.line, '\n')
	if i < 0 {
		return len(p), nil
	}
	err := r.writeRedacted(r.line[:i+1])
	r.line = append(r.line[:0], r.line[i+1:]...)
	return len(p), err
}

// Flush writes what is left of an unfinished line.
func (r *redactingWriter) Flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.line) == 0 {
		return nil
	}
	err := r.writeRedacted(r.line)
	r.line = r.line[:0]
	return err
}

func (r *redactingWriter) writeRedacted(b []byte) error {
	_, err := io.WriteString(r.w, r.redact.Text(string(b)))
	return err
}
