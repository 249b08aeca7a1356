package pgqueue

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// ParseFairWeights reads Limit.FairWeights written as comma-separated
// key=weight pairs ("acme=3,globex=2"), as `jobfence limits set
// --fair-weights` and the dashboard take them; "" is none. A key holds no
// comma or equals sign. A pair that is not key=weight with a whole
// weight, or a key named twice, is an *InvalidLimitError; SetLimit checks
// the weights' range.
func ParseFairWeights(s string) (map[string]int, error) {
	bad := func(reason string) (map[string]int, error) {
		return nil, &InvalidLimitError{Field: "FairWeights", Reason: reason}
	}
	out := map[string]int{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, pair := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok {
			return bad(fmt.Sprintf("entry %q is not key=weight", pair))
		}
		w, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return bad(fmt.Sprintf("weight %q of key %q is not a whole number", v, k))
		}
		if _, dup := out[k]; dup {
			return bad(fmt.Sprintf("names key %q twice", k))
		}
		out[k] = w
	}
	return out, nil
}

// FormatFairWeights writes weights as ParseFairWeights reads them, keys
// in order.
func FormatFairWeights(weights map[string]int) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(weights)) {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%d", k, weights[k])
	}
	return b.String()
}
