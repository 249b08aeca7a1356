package dashboard

import (
	"fmt"
	"io"
	"net/http"
	"strings"
)

// metrics serves /metrics: the summary as Prometheus text, one statement
// per scrape. These are fleet-wide series read from the database; the
// per-process series (handler time, claims) come from package telemetry.
func (h *handler) metrics(w http.ResponseWriter, r *http.Request) {
	s, err := h.readSummary(r.Context())
	if err != nil {
		h.log.Error("dashboard: metrics", "error", err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	writeMetrics(w, s)
}

// writeMetrics writes s in Prometheus' text format.
func writeMetrics(w io.Writer, s *summary) {
	family := func(name, typ, help string) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	family("jobfence_queue_jobs", "gauge", "Jobs per queue and state (completed and cancelled jobs are not counted: see jobfence_queue_completed).")
	for _, q := range s.Queues {
		for _, st := range summaryStates {
			fmt.Fprintf(w, "jobfence_queue_jobs{queue=\"%s\",state=\"%s\"} %d\n", labelValue(q.Name), st, q.Counts[st])
		}
	}
	family("jobfence_queue_completed", "gauge", "Jobs per queue completed in the last window (5m or 1h).")
	for _, q := range s.Queues {
		fmt.Fprintf(w, "jobfence_queue_completed{queue=\"%s\",window=\"5m\"} %d\n", labelValue(q.Name), q.Completed5m)
		fmt.Fprintf(w, "jobfence_queue_completed{queue=\"%s\",window=\"1h\"} %d\n", labelValue(q.Name), q.Completed1h)
	}
	family("jobfence_queue_oldest_waiting_age_seconds", "gauge", "Age of the queue's longest-waiting ready job; 0 when none waits.")
	for _, q := range s.Queues {
		age := 0.0
		if !q.OldestWaiting.IsZero() {
			age = max(s.Now.Sub(q.OldestWaiting).Seconds(), 0)
		}
		fmt.Fprintf(w, "jobfence_queue_oldest_waiting_age_seconds{queue=\"%s\"} %g\n", labelValue(q.Name), age)
	}
	family("jobfence_queue_paused", "gauge", "1 when the queue is paused fleet-wide.")
	for _, q := range s.Queues {
		paused := 0
		if q.Paused {
			paused = 1
		}
		fmt.Fprintf(w, "jobfence_queue_paused{queue=\"%s\"} %d\n", labelValue(q.Name), paused)
	}
	family("jobfence_workers_live", "gauge", "Worker instances reporting to the registry now.")
	fmt.Fprintf(w, "jobfence_workers_live %d\n", s.LiveWorkers)
	family("jobfence_workers_stale_outcomes", "gauge", "Outcomes refused as stale by the fence, summed over the registered worker instances since each started.")
	fmt.Fprintf(w, "jobfence_workers_stale_outcomes %d\n", s.StaleOutcomes)
}

// labelValue escapes a label value for the text format: a queue name is
// user data and may hold a quote, a backslash or a newline.
func labelValue(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}
