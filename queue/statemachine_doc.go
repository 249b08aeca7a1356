package queue

import (
	"strings"
)

// statesMarkdown renders the state machine's two tables as docs/states.md
// shows them, between its markers: what each state holds, and every
// transition. A test keeps the file equal to it.
func statesMarkdown() string {
	var b strings.Builder
	b.WriteString("| state | concurrency slot (a sequence's turn) | unused rate slot | lease and fence | claimable | deadline sweep | waits for dependencies | entering it, for dependents |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	yes := func(v bool) string {
		if v {
			return "yes"
		}
		return "no"
	}
	for _, r := range StateRules() {
		dep := r.ReleasesDependents
		if dep == "" {
			dep = "-"
		}
		b.WriteString("| `" + string(r.State) + "` | " + r.Slot.String() + " | " + yes(r.RateSlot) + " | " + yes(r.Lease) + " | " +
			yes(r.Claimable) + " | " + yes(r.Deadline) + " | " + yes(r.DependentsWait) + " | " + dep + " |\n")
	}
	b.WriteString("\n| transition | event | from | to | keeps and frees |\n")
	b.WriteString("|---|---|---|---|---|\n")
	for _, t := range Transitions() {
		b.WriteString("| `" + t.Name + "` | " + t.Event + " | " + stateList(t.From) + " | " + stateList(t.To) + " | " + t.Effect + " |\n")
	}
	return b.String()
}

// stateList writes states as a table cell; none is "(new)" or "(gone)"
// by the column, so the caller's empty list reads "-".
func stateList(ss []State) string {
	if len(ss) == 0 {
		return "-"
	}
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = "`" + string(s) + "`"
	}
	return strings.Join(out, ", ")
}
