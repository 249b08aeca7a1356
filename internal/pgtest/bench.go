package pgtest

import (
	"slices"
	"testing"
	"time"
)

// Loop runs f as b's loop body and reports, besides the mean, the median
// time of one call as "ms-median": on a machine shared with other work, a
// few calls that waited for a CPU move the mean far more than they move
// what a call usually costs.
func Loop(b *testing.B, f func()) {
	b.Helper()
	var times []time.Duration
	for b.Loop() {
		start := time.Now()
		f()
		times = append(times, time.Since(start))
	}
	if len(times) == 0 {
		return
	}
	slices.Sort(times)
	b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "ms-median")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(len(times)), "ms-mean")
}
