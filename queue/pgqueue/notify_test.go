package pgqueue

import (
	"strconv"
	"testing"

	"github.com/jobfence/jobfence/queue"
)

// FuzzCancelPayload: the parser of cancel notifications never panics; what
// it accepts is a lease whose payload parses back to it; and every lease's
// payload parses back to that lease.
func FuzzCancelPayload(f *testing.F) {
	f.Add("42:7", int64(42), int64(7))
	f.Add("9223372036854775807:1", int64(-1), int64(0))
	f.Add(":", int64(1), int64(-9223372036854775808))
	f.Add("1:2:3", int64(0), int64(0))
	f.Add("+5:07", int64(5), int64(7))
	f.Fuzz(func(t *testing.T, payload string, id, fence int64) {
		if l, err := parseCancelPayload(payload); err == nil {
			if back, err := parseCancelPayload(cancelPayload(l)); err != nil || back != l {
				t.Fatalf("%q parsed as %+v, whose payload %q parses as %+v, %v", payload, l, cancelPayload(l), back, err)
			}
		}
		l := queue.Lease{ID: id, Fence: fence}
		back, err := parseCancelPayload(cancelPayload(l))
		if err != nil || back != l {
			t.Fatalf("lease %+v: payload %q parses as %+v, %v", l, cancelPayload(l), back, err)
		}
		if want := strconv.FormatInt(id, 10) + ":" + strconv.FormatInt(fence, 10); cancelPayload(l) != want {
			t.Fatalf("cancelPayload(%+v) = %q, want %q", l, cancelPayload(l), want)
		}
	})
}
