package main

import (
	"testing"
	"time"
)

// TestVersusLine: the pairs' ratios, their median and the medians' ratio,
// from the workers' start and after the warm-up; a run that ended before
// its warm-up leaves the second part out rather than report a zero.
func TestVersusLine(t *testing.T) {
	run := func(rate float64, warmJobs int64) benchResult {
		return benchResult{rate: rate, warmJobs: warmJobs, warmElapsed: 10 * time.Second}
	}
	ones := []benchResult{run(40000, 420000), run(46000, 470000), run(47000, 480000)}
	fleets := []benchResult{run(30000, 330000), run(35000, 360000), run(38000, 390000)}
	got := versusLine(20, ones, fleets)
	want := "20 instances against one connected directly (pairs: 3): " +
		"ratios 0.75, 0.76, 0.81 (median 0.76); medians 35000 against 46000 jobs/s (0.76); " +
		"after the warm-up: ratios 0.79, 0.77, 0.81 (median 0.79); medians 36000 against 47000 jobs/s (0.77)"
	if got != want {
		t.Errorf("versusLine:\n got %s\nwant %s", got, want)
	}

	fleets[1].warmElapsed = 0
	got = versusLine(20, ones, fleets)
	want = "20 instances against one connected directly (pairs: 3): " +
		"ratios 0.75, 0.76, 0.81 (median 0.76); medians 35000 against 46000 jobs/s (0.76)"
	if got != want {
		t.Errorf("versusLine with a run shorter than its warm-up:\n got %s\nwant %s", got, want)
	}
}
