package dashboard_test

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/dashboard"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/worker"
)

type mailArgs struct{}

func (mailArgs) Kind() string { return "mail" }

// TestUnknownKindFilter: a job that a real worker put back because it has
// no handler for the job's kind is found by /jobs?putback=unknown-kind and
// counted by /metrics; jobs put back for other reasons, failed, finished
// since or never run are not.
func TestUnknownKindFilter(t *testing.T) {
	d := newDash(t, dashboard.Options{})
	ctx := context.Background()

	// A worker of an older release, which knows mail but not newsletter.
	stuck := d.enqueue(queue.EnqueueParams{Kind: "newsletter", Queue: "q1"})
	reg := worker.NewRegistry()
	worker.Add(reg, func(context.Context, *worker.Job[mailArgs]) error { return nil })
	// No promotion: once put back, the job stays scheduled.
	w, err := worker.New(d.q, reg, worker.Config{Queues: map[string]int{"q1": 1}, PollInterval: 50 * time.Millisecond,
		PromoteInterval: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testwatch.WaitFor(t, 20*time.Second, "the worker to put the job back", func() bool { return d.state(stuck) == queue.StateScheduled })
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}

	unknownKind := func(kind string) *queue.AttemptError {
		return &queue.AttemptError{At: time.Now(), PutBack: true,
			Error: fmt.Sprintf("%v %q: no handler registered in worker w1 (it handles [mail])", queue.ErrUnknownKind, kind)}
	}
	// Put back with no wait: ready, and still waiting for a worker that
	// knows its kind.
	ready := d.enqueue(queue.EnqueueParams{Kind: "newsletter", Queue: "q2"})
	d.finish(d.claim("q2", 1)[0], queue.OutcomeSnooze, unknownKind("newsletter"))
	// Put back because its connection broke.
	outage := d.enqueue(queue.EnqueueParams{Kind: "mail", Queue: "q3"})
	if _, err := d.q.Finish(ctx, []queue.Finish{{Lease: d.claim("q3", 1)[0].Lease(), Outcome: queue.OutcomeSnooze, Delay: time.Minute,
		Error: &queue.AttemptError{At: time.Now(), PutBack: true, PutBacks: 1, Error: "connection reset by peer; put back without spending the attempt"}}}); err != nil {
		t.Fatal(err)
	}
	failed := d.enqueue(queue.EnqueueParams{Kind: "mail", Queue: "q4"})
	d.finish(d.claim("q4", 1)[0], queue.OutcomeRetry, &queue.AttemptError{Attempt: 1, At: time.Now(), Error: "smtp: 554 rejected"})
	// Put back, then run by a worker that knew its kind.
	ranSince := d.enqueue(queue.EnqueueParams{Kind: "newsletter", Queue: "q5"})
	d.finish(d.claim("q5", 1)[0], queue.OutcomeSnooze, unknownKind("newsletter"))
	d.finish(d.claim("q5", 1)[0], queue.OutcomeComplete, nil)
	never := d.enqueue(queue.EnqueueParams{Kind: "newsletter", Queue: "q6"})

	link := func(id int64) string { return fmt.Sprintf(`href="/jobs/%d"`, id) }
	body := d.getOK("/jobs?putback=unknown-kind")
	mustContain(t, "/jobs?putback=unknown-kind", body, link(stuck), link(ready), `id="filter-unknown-kind" checked`,
		`no handler registered in worker`)
	for _, id := range []int64{outage, failed, ranSince, never} {
		if strings.Contains(body, link(id)) {
			t.Errorf("/jobs?putback=unknown-kind lists job %d", id)
		}
	}
	// The bulk actions do not select by put-back: they are not offered.
	if strings.Contains(body, "Retry all matching") {
		t.Error("/jobs?putback=unknown-kind offers the bulk actions")
	}
	if body := d.getOK("/jobs?putback=unknown-kind&queue=q1"); !strings.Contains(body, link(stuck)) || strings.Contains(body, link(ready)) {
		t.Errorf("/jobs?putback=unknown-kind&queue=q1 does not list job %d alone:\n%s", stuck, body)
	}
	if body := d.getOK("/jobs"); !strings.Contains(body, `id="filter-unknown-kind">`) || !strings.Contains(body, link(never)) {
		t.Errorf("/jobs lacks the unchecked filter or job %d", never)
	}
	if code, _ := d.get("/jobs?putback=outage"); code != 400 {
		t.Errorf("GET /jobs?putback=outage = %d, want 400", code)
	}

	// The gauge counts the jobs waiting out a put-back's delay.
	_, metrics := d.get("/metrics")
	for q, n := range map[string]int{"q1": 1, "q2": 0, "q3": 0, "q4": 0} {
		re := fmt.Sprintf(`(?m)^jobfence_queue_unknown_kind_jobs\{queue="%s"\} %d$`, q, n)
		if !regexp.MustCompile(re).MatchString(metrics) {
			t.Errorf("/metrics has no line matching %s:\n%s", re, metrics)
		}
	}
}
