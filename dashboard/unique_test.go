package dashboard_test

import (
	"encoding/hex"
	"fmt"
	"html"
	"regexp"
	"testing"
	"time"

	"github.com/jobfence/jobfence/dashboard"
	"github.com/jobfence/jobfence/queue"
)

// TestJobPageUniqueness: a job made unique by UniqueOpts, which has no
// explicit key, shows the key jobfence computed, what from (when the job
// gives it again), the states in which it refuses a duplicate and whether
// it does now, or which job holds the key instead; a job with an
// explicit key shows that key, and a job with neither "-".
func TestJobPageUniqueness(t *testing.T) {
	d := newDash(t, dashboard.Options{})
	uniqueCell := func(id int64) string {
		t.Helper()
		body := html.UnescapeString(d.getOK(fmt.Sprintf("/jobs/%d", id)))
		m := regexp.MustCompile(`(?s)<dd id="job-unique">(.*?)</dd>`).FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("job %d: no unique key on its page:\n%s", id, body)
		}
		return regexp.MustCompile(`<[^>]*>`).ReplaceAllString(m[1], "")
	}
	byArgs := queue.EnqueueParams{Kind: "mail", Queue: "email", Args: []byte(`{"to":"ada@example.com"}`), Unique: &queue.UniqueOpts{ByArgs: true}}
	hash, err := byArgs.UniqueHash(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	first := d.enqueue(byArgs)
	want := "computed by its UniqueOpts from its kind and args: " + hex.EncodeToString(hash) +
		"; it refuses a duplicate while available, scheduled, running, retryable, limited: now"
	if got := uniqueCell(first); got != want {
		t.Errorf("unique by args:\n%s\nwant:\n%s", got, want)
	}

	// Completed, it refuses nothing; a duplicate inserted since holds the key.
	d.finish(d.claim("email", 1)[0], queue.OutcomeComplete, nil)
	second := d.enqueue(byArgs)
	want = fmt.Sprintf("computed by its UniqueOpts from its kind and args: %s"+
		"; it refuses a duplicate while available, scheduled, running, retryable, limited: not now, job %d holds the key", hex.EncodeToString(hash), second)
	if got := uniqueCell(first); got != want {
		t.Errorf("completed unique job:\n%s\nwant:\n%s", got, want)
	}

	byQueueAndState := d.enqueue(queue.EnqueueParams{Kind: "mail", Queue: "bulk", Unique: &queue.UniqueOpts{ByQueue: true,
		ByState: []queue.State{queue.StateAvailable, queue.StateScheduled, queue.StateRunning, queue.StateRetryable, queue.StateCompleted}}})
	want = "; it refuses a duplicate while available, scheduled, running, retryable, completed, limited: now"
	if got := uniqueCell(byQueueAndState); !regexp.MustCompile(`^computed by its UniqueOpts from its kind and queue: [0-9a-f]{64}` + regexp.QuoteMeta(want) + `$`).MatchString(got) {
		t.Errorf("unique by queue, also while completed:\n%s\nwant kind and queue, a key, and%s", got, want)
	}

	// A period is not recorded with the job: the page says so.
	byPeriod := d.enqueue(queue.EnqueueParams{Kind: "report", Queue: "email", Unique: &queue.UniqueOpts{ByPeriod: time.Hour}})
	if got := uniqueCell(byPeriod); !regexp.MustCompile(`^computed by its UniqueOpts from its kind and some of: args fields \(ByFields or tagged ones\), queue, period \(ByPeriod\); which ones is not recorded with the job: [0-9a-f]{64}; it refuses`).MatchString(got) {
		t.Errorf("unique by period:\n%s", got)
	}

	explicit := d.enqueue(queue.EnqueueParams{Kind: "mail", Queue: "email", UniqueKey: "welcome-42"})
	if got := uniqueCell(explicit); got != "welcome-42" {
		t.Errorf("explicit key: %q, want welcome-42", got)
	}
	if got := uniqueCell(d.enqueue(queue.EnqueueParams{Kind: "mail", Queue: "email"})); got != "-" {
		t.Errorf("a job that is not unique: %q, want -", got)
	}
}
