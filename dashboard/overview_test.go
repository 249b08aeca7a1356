package dashboard_test

import (
	"html"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/jobfence/jobfence/dashboard"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
)

// TestOverviewCountCap: with the count cap at 3, a few jobs show what a
// million would: a queue's discarded jobs beyond the cap read "3+",
// completions beyond the cap over all queues read "3+" in the queue
// counting reached, and a queue it did not reach reads "?", each with a title saying
// why; counts under the cap are exact, and the note states the caps. The
// queues page shows the same counts.
func TestOverviewCountCap(t *testing.T) {
	d := newDash(t, dashboard.WithCountCap(dashboard.Options{}, 3))
	// Migration 6's indexes, whichever the migrations made: under the old
	// claim index a queue's waiting jobs are counted to a tenth of the
	// cap (see pgqueue's TestQueuesCountCap).
	pgtest.UseClaimIndexes(t, d.db, pgtest.PerStateIndexes)
	for range 5 {
		d.enqueue(queue.EnqueueParams{Kind: "report", Queue: "broken"})
	}
	for _, j := range d.claim("broken", 5) {
		d.finish(j, queue.OutcomeDiscard, &queue.AttemptError{Attempt: 1, At: time.Now(), Error: "no printer"})
	}
	for range 2 {
		d.enqueue(queue.EnqueueParams{Kind: "mail", Queue: "small"})
	}
	for range 4 {
		d.enqueue(queue.EnqueueParams{Kind: "hook", Queue: "busy"})
	}
	for _, j := range d.claim("busy", 4) {
		d.finish(j, queue.OutcomeComplete, nil)
	}

	// html/template writes "+" as "&#43;"; a browser shows "+".
	body := html.UnescapeString(d.getOK("/"))
	cells := func(body, q string) []string {
		t.Helper()
		row := regexp.MustCompile(`(?s)<tr data-queue="` + q + `">.*?</tr>`).FindString(body)
		if row == "" {
			t.Fatalf("no row for queue %s:\n%s", q, body)
		}
		var out []string
		for _, m := range regexp.MustCompile(`(?s)<td class="num[^"]*">(.*?)</td>`).FindAllStringSubmatch(row, -1) {
			out = append(out, regexp.MustCompile(`<[^>]*>`).ReplaceAllString(m[1], ""))
		}
		return out
	}
	// available, scheduled, limited, pending, running, retryable,
	// discarded, cancelled, completed 5 min, 1 h
	for q, want := range map[string][]string{
		"broken": {"0", "0", "0", "0", "0", "0", "3+", "?", "?", "?"},
		"small":  {"2", "0", "0", "0", "0", "0", "0", "?", "?", "?"},
		"busy":   {"0", "0", "0", "0", "0", "0", "0", "?", "3+", "3+"},
	} {
		if got := cells(body, q); !slices.Equal(got, want) {
			t.Errorf("overview, queue %s: %q, want %q", q, got, want)
		}
	}
	mustContain(t, "overview", body,
		`<span class="atleast" title="at least 3: counting stopped there">3+</span>`,
		`<span class="atleast" title="not counted: counting stopped before this queue's jobs in this state">?</span>`,
		`Counts stop at 3,`,
		`exactly while there are at most 3 of them over all queues`,
		`pending workflow tasks while the 3 newest workflows' tasks are all of them`)

	body = html.UnescapeString(d.getOK("/queues"))
	// available, scheduled, running, retryable, completed, discarded, cancelled, limited, pending
	for q, want := range map[string][]string{
		"broken": {"0", "0", "0", "0", "?", "3+", "?", "0", "0"},
		"busy":   {"0", "0", "0", "0", "3+", "0", "?", "0", "0"},
	} {
		if got := cells(body, q); !slices.Equal(got, want) {
			t.Errorf("queues page, queue %s: %q, want %q", q, got, want)
		}
	}
}
