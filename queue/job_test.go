package queue_test

import (
	"testing"

	"github.com/jobfence/jobfence/queue"
)

// TestPutBacksInARow: the run is the last counted put-back's count; a
// spent attempt ends it, and put-backs of a job that did not run (no
// count: an unknown kind) neither count nor break it.
func TestPutBacksInARow(t *testing.T) {
	spent := queue.AttemptError{Error: "boom"}
	counted := func(n int) queue.AttemptError { return queue.AttemptError{PutBack: true, PutBacks: n} }
	unknownKind := queue.AttemptError{PutBack: true}
	for _, tt := range []struct {
		name string
		errs []queue.AttemptError
		want int
	}{
		{"none", nil, 0},
		{"a spent attempt", []queue.AttemptError{spent}, 0},
		{"two put-backs", []queue.AttemptError{counted(1), counted(2)}, 2},
		{"put-backs before a spent attempt", []queue.AttemptError{counted(1), counted(2), spent}, 0},
		{"spent at the limit", []queue.AttemptError{counted(1), counted(2), {PutBacks: queue.PutBackLimit}}, 0},
		{"an unknown kind in between", []queue.AttemptError{counted(1), unknownKind, unknownKind}, 1},
		{"only unknown kinds", []queue.AttemptError{spent, unknownKind}, 0},
	} {
		if got := queue.PutBacksInARow(tt.errs); got != tt.want {
			t.Errorf("%s: PutBacksInARow = %d, want %d", tt.name, got, tt.want)
		}
	}
}
