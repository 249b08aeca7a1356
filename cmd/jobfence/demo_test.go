package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// init runs the demo's worker process when the demo re-executes the test
// binary, as it re-executes jobfence itself outside tests.
func init() {
	if os.Getenv(demoChildEnv) != "" {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
}

// TestDemo runs the whole demo: every scenario's row says PASS and the
// command exits 0.
func TestDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, []string{"demo"}, &out, &errb)
	t.Logf("stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	if code != 0 {
		t.Fatalf("jobfence demo exited %d", code)
	}
	rows := regexp.MustCompile(`(?m)^([0-9]+) +(.*?)  .*  PASS$`).FindAllStringSubmatch(out.String(), -1)
	if len(rows) != 10 {
		t.Fatalf("%d PASS rows in the table, want 10", len(rows))
	}
	for i, r := range rows {
		if r[1] != strconv.Itoa(i+1) {
			t.Fatalf("row %d is scenario %s", i+1, r[1])
		}
	}
	if !strings.Contains(rows[9][2], "durable") {
		t.Errorf("row 10 is %q, want the durable steps' scenario", rows[9][2])
	}
	if strings.Contains(out.String(), "FAIL") {
		t.Fatal("the output says FAIL")
	}
	for _, want := range []string{"SIGSTOP", "SIGKILL", "SIGCONT", "committed 0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the progress lines do not mention %q", want)
		}
	}
}

func TestDemoVerdicts(t *testing.T) {
	sc := scenario{name: "paused worker (SIGSTOP)", attempts: "writes", effects: "shipments", reject: "stale"}
	tests := []struct {
		name    string
		r       result
		verdict string
	}{
		{"effect once", result{n: 4, scenario: sc, outcome: outcome{Attempted: 2, Effects: 1, WantEffects: 1, Rejected: 1}}, "PASS"},
		{"effect twice", result{n: 4, scenario: sc, outcome: outcome{Attempted: 2, Effects: 2, WantEffects: 1}}, "FAIL: 2 effects, want 1"},
		{"effect lost", result{n: 4, scenario: sc, outcome: outcome{Attempted: 2, Effects: 0, WantEffects: 1}}, "FAIL: 0 effects, want 1"},
		{"other invariant", result{n: 4, scenario: sc, outcome: outcome{Effects: 1, WantEffects: 1, Problems: []string{"a", "b"}}}, "FAIL: a; b"},
		{"error", result{n: 4, scenario: sc, err: errors.New("worker process 7 exited early")}, "FAIL: worker process 7 exited early"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.r.verdict(); got != tt.verdict {
				t.Fatalf("verdict %q, want %q", got, tt.verdict)
			}
			var out bytes.Buffer
			err := writeTable(&out, []result{tt.r})
			if pass := tt.verdict == "PASS"; pass != (err == nil) {
				t.Fatalf("writeTable: %v for verdict %s", err, tt.verdict)
			}
			if err != nil && (!errors.Is(err, errDemoFailed) || err.Error() != "invariant failed in 1 of 1 scenarios") {
				t.Fatalf("writeTable error %q", err)
			}
			if !strings.Contains(out.String(), "4  paused worker (SIGSTOP)  ") || !strings.Contains(out.String(), tt.verdict) {
				t.Fatalf("table:\n%s", out.String())
			}
		})
	}
}

// TestDemoBadInput: bad flags are refused with a clear error before any
// service starts.
func TestDemoBadInput(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"demo", "--only", "11"}, `jobfence demo: --only "11": "11" is not a scenario number from 1 to 10` + "\n"},
		{[]string{"demo", "--only", "4,x"}, `jobfence demo: --only "4,x": "x" is not a scenario number from 1 to 10` + "\n"},
		{[]string{"demo", "now"}, `jobfence demo: unexpected argument "now" (flags: --only)` + "\n"},
		{[]string{"demo-child", "sleepy"}, "jobfence demo-child: usage: demo-child paused|killed|order-workflow|durable-steps (it is run by jobfence demo, with DATABASE_URL set)\n"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(context.Background(), tt.args, &out, &errb); code != 1 {
				t.Fatalf("exit %d, want 1", code)
			}
			if errb.String() != tt.want || out.Len() != 0 {
				t.Fatalf("stderr %q, stdout %q; want stderr %q", errb.String(), out.String(), tt.want)
			}
		})
	}
}

func TestPickScenarios(t *testing.T) {
	for only, want := range map[string][]int{"": {0, 1, 2, 3, 4, 5, 6}, "5,4,5": {3, 4}, " 7": {6}} {
		got, err := pickScenarios(only, 7)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("pickScenarios(%q) = %v, %v; want %v", only, got, err, want)
		}
	}
}
