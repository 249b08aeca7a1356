package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"
	"time"
)

// TestScrape runs the example and checks that its scrape has the series
// docs/observability.md promises: completions, handler time, the stale outcome and
// the queue wait.
func TestScrape(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out); err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{
		`(?m)^jobfence_jobs_completed_total\{[^}]*kind="report"[^}]*queue="observability"[^}]*\} 200$`,
		`(?m)^jobfence_jobs_retried_total\{[^}]*kind="report"[^}]*\} 20$`,
		`(?m)^jobfence_jobs_stale_total\{[^}]*kind="report"[^}]*\} 1$`,
		`(?m)^jobfence_job_duration_seconds_bucket\{[^}]*kind="report"`,
		`(?m)^jobfence_job_wait_seconds_count\{[^}]*kind="report"[^}]*\} 221$`,
		`(?m)^jobfence_claim_duration_seconds_count\{[^}]*queue="observability"`,
	} {
		if !regexp.MustCompile(re).Match(out.Bytes()) {
			t.Errorf("scrape has no line matching %s", re)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", out.String())
	}
}
