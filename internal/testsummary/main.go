// Command testsummary reads `go test -json` on its standard input, prints
// what a person needs from it (each package's result line, and the whole
// output of every test that failed), and ends with one line:
// "N passed, N failed, N skipped". It exits 1 if anything failed, a
// package did not build, or no test ran at all, so `make test` can pipe
// through it and still fail.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

func main() {
	os.Exit(run(os.Stdin, os.Stdout))
}

// run summarises the events of in onto out and returns the exit code.
func run(in io.Reader, out io.Writer) int {
	var passed, failed, skipped, brokenPackages int
	// Output of running tests, kept until each ends: printed only if it
	// fails, so a passing suite reads as a list of packages.
	pending := map[string][]string{}
	var failures []string
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			// Not an event (a build error printed as text): pass it on.
			fmt.Fprintln(out, string(line))
			continue
		}
		key := e.Package + " " + e.Test
		switch e.Action {
		case "output", "build-output":
			if e.Test != "" {
				pending[key] = append(pending[key], e.Output)
				continue
			}
			// A package's own lines: its result and anything a failing
			// TestMain or a hang watchdog printed.
			if o := strings.TrimRight(e.Output, "\n"); o != "" && !strings.HasPrefix(o, "=== ") && o != "PASS" && o != "FAIL" {
				if strings.HasPrefix(o, "ok ") || strings.HasPrefix(o, "FAIL") || strings.HasPrefix(o, "?") || strings.HasPrefix(o, "---") {
					fmt.Fprintln(out, o)
				} else {
					pending[key] = append(pending[key], e.Output)
				}
			}
		case "pass":
			if e.Test != "" {
				passed++
			}
			delete(pending, key)
		case "skip":
			if e.Test != "" {
				skipped++
			}
			delete(pending, key)
		case "fail", "build-fail":
			if e.Test != "" {
				failed++
				failures = append(failures, e.Package+" "+e.Test)
			} else {
				brokenPackages++
			}
			fmt.Fprint(out, strings.Join(pending[key], ""))
			delete(pending, key)
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(out, "testsummary: reading go test -json:", err)
		brokenPackages++
	}
	for _, f := range failures {
		fmt.Fprintln(out, "FAILED:", f)
	}
	// A package that failed outside any test (a build error, a TestMain
	// that could not start its server) counts as a failure too.
	if failed == 0 && brokenPackages > 0 {
		failed = brokenPackages
	}
	fmt.Fprintf(out, "%d passed, %d failed, %d skipped\n", passed, failed, skipped)
	if failed > 0 || brokenPackages > 0 || passed == 0 {
		return 1
	}
	return 0
}
