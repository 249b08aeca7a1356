package queue

import (
	"os"
	"strings"
	"testing"
)

// The markers around the generated part of docs/states.md.
const (
	statesBegin = "<!-- states:begin (generated from queue/statemachine.go; JOBFENCE_UPDATE_DOCS=1 go test ./queue rewrites it) -->\n"
	statesEnd   = "<!-- states:end -->"
)

// TestStatesDocIsTheTable: docs/states.md shows the state machine's tables
// as the code has them.
func TestStatesDocIsTheTable(t *testing.T) {
	const path = "../docs/states.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i, j := strings.Index(s, statesBegin), strings.Index(s, statesEnd)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the markers %q and %q", path, statesBegin, statesEnd)
	}
	want := statesMarkdown()
	got := s[i+len(statesBegin) : j]
	if got == want {
		return
	}
	if os.Getenv("JOBFENCE_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(path, []byte(s[:i+len(statesBegin)]+want+s[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("%s's tables differ from queue.StateRules and queue.Transitions; run JOBFENCE_UPDATE_DOCS=1 go test ./queue -run TestStatesDocIsTheTable", path)
}

// TestStateRulesCoverEveryState: each state has one rule, and a final
// state holds nothing a start needs.
func TestStateRulesCoverEveryState(t *testing.T) {
	seen := map[State]bool{}
	for _, r := range StateRules() {
		if seen[r.State] {
			t.Fatalf("state %s has two rules", r.State)
		}
		seen[r.State] = true
		if r.State.Final() && (r.Claimable || r.Lease || r.Deadline || r.RateSlot) {
			t.Fatalf("final state %s: %+v", r.State, r)
		}
	}
	for _, s := range States() {
		if !seen[s] {
			t.Fatalf("state %s has no rule", s)
		}
	}
	names := map[string]bool{}
	for _, tr := range Transitions() {
		if names[tr.Name] {
			t.Fatalf("transition %s twice", tr.Name)
		}
		names[tr.Name] = true
		for _, s := range append(append([]State{}, tr.From...), tr.To...) {
			if !seen[s] {
				t.Fatalf("transition %s names unknown state %s", tr.Name, s)
			}
		}
	}
}
