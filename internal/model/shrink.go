package model

import "time"

// Shrink cuts ops down to a shorter list that still fails: delta
// debugging, which drops chunks of halving size (then single operations)
// and keeps each cut after which fails still reports a violation. It
// replays at most maxRuns times and stops at until, returning the
// shortest failing list found and the replays it spent. fails replays a
// list on a fresh schema.
func Shrink(ops []Op, fails func([]Op) bool, maxRuns int, until time.Time) ([]Op, int) {
	runs := 0
	more := func() bool { return runs < maxRuns && time.Now().Before(until) }
	chunk := len(ops) / 2
	for chunk >= 1 && more() {
		cut := false
		for at := 0; at < len(ops) && more(); {
			end := min(at+chunk, len(ops))
			cand := append(append([]Op(nil), ops[:at]...), ops[end:]...)
			runs++
			if len(cand) > 0 && fails(cand) {
				ops, cut = cand, true
				continue // the same position now holds the next chunk
			}
			at = end
		}
		if !cut || chunk > 1 {
			chunk /= 2
		}
	}
	return ops, runs
}
