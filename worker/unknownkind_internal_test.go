package worker

import (
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// TestUnknownKindDelay: the nth put-back in a row for an unknown kind
// waits n² seconds, less up to a tenth, and never more than a minute
// however many there were; any other error before them starts the count
// again.
func TestUnknownKindDelay(t *testing.T) {
	unknown := queue.AttemptError{Error: `jobfence: unknown job kind "mail": no handler registered in worker w1 (it handles [sms])`, PutBack: true}
	outage := queue.AttemptError{Error: "connection reset by peer; put back without spending the attempt (1 in a row; at 3 the attempt is spent)", PutBack: true, PutBacks: 1}
	failed := queue.AttemptError{Error: "smtp: 554 rejected"}
	run := func(n int, before ...queue.AttemptError) []queue.AttemptError {
		errs := append([]queue.AttemptError(nil), before...)
		for range n {
			errs = append(errs, unknown)
		}
		return errs
	}
	for _, tt := range []struct {
		name string
		errs []queue.AttemptError
		want time.Duration
	}{
		{"first put-back", nil, time.Second},
		{"second", run(1), 4 * time.Second},
		{"fifth", run(4), 25 * time.Second},
		{"seventh", run(6), 49 * time.Second},
		{"eighth: the cap", run(7), time.Minute},
		{"twentieth", run(19), time.Minute},
		{"a thousandth", run(999), time.Minute},
		{"after a failure", run(2, unknown, unknown, unknown, unknown, failed), 9 * time.Second},
		{"after an outage's put-back", run(1, unknown, unknown, unknown, outage), 4 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			job := &queue.Job{Kind: "mail", Errors: tt.errs}
			for range 200 {
				if d := unknownKindDelay(job); d > tt.want || d < tt.want-tt.want/10 {
					t.Fatalf("unknownKindDelay = %v, want %v less up to a tenth", d, tt.want)
				}
			}
		})
	}
}
