package main

import (
	"fmt"
	"slices"
	"strings"
)

// versusLine compares a fleet's runs with one instance's, run by pairs on
// the same server, each side going first in turn (--versus-one): each
// pair's ratio of the fleet's rate to the one instance's, their median,
// and the ratio of the two medians, for the rates from the workers' start
// (river bench's window, ramp-up included) and, when the runs outlasted
// their warm-up, for the rates after it: what the fleet sustains, without
// the start of its processes and their connections. On a shared machine
// whose speed drifts from minute to minute, a pair's two runs see much the
// same machine; runs made apart do not.
func versusLine(instances int, ones, fleets []benchResult) string {
	n := min(len(ones), len(fleets))
	ones, fleets = ones[:n], fleets[:n]
	line := fmt.Sprintf("%d instances against one connected directly (pairs: %d): ", instances, n) +
		pairRatios(ones, fleets, func(r benchResult) float64 { return r.rate })
	cold := func(r benchResult) bool { return r.warmRate() == 0 }
	if slices.ContainsFunc(ones, cold) || slices.ContainsFunc(fleets, cold) {
		return line
	}
	return line + "; after the warm-up: " + pairRatios(ones, fleets, benchResult.warmRate)
}

// pairRatios reports rate's ratio of each pair of fleets[i] to ones[i],
// their median, and the ratio of the medians.
func pairRatios(ones, fleets []benchResult, rate func(benchResult) float64) string {
	ratios := make([]float64, len(ones))
	strs := make([]string, len(ones))
	for i := range ones {
		if one := rate(ones[i]); one > 0 {
			ratios[i] = rate(fleets[i]) / one
		}
		strs[i] = fmt.Sprintf("%.2f", ratios[i])
	}
	oneMed, fleetMed := median(figures(ones, rate)), median(figures(fleets, rate))
	ofMedians := 0.0
	if oneMed > 0 {
		ofMedians = fleetMed / oneMed
	}
	return fmt.Sprintf("ratios %s (median %.2f); medians %.0f against %.0f jobs/s (%.2f)",
		strings.Join(strs, ", "), median(ratios), fleetMed, oneMed, ofMedians)
}

// median returns the median of xs, or 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// figures returns f of each run.
func figures(rs []benchResult, f func(benchResult) float64) []float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	return v
}
