package dashboard

import (
	"net/http"

	"github.com/jobfence/jobfence/queue/pgqueue"
)

// overviewPage is /'s data.
type overviewPage struct {
	fleet
	Queues []pgqueue.QueueInfo
	// Cap is the client's count cap, for the note that explains "10,000+"
	// (a Count, for its thousands separators).
	Cap pgqueue.Count
	// Charts are the fleet's series over time (or a queue's and kind's,
	// as filtered).
	Charts chartsView
}

// overview serves /: every queue's counts, recent completions, oldest
// waiting job and pause, the fleet's live workers and stale outcomes, and
// the charts over time (readCharts).
// The counts are pgqueue.Client.Queues', bounded, so the page costs the
// same at a million jobs as at a thousand.
func (h *handler) overview(w http.ResponseWriter, r *http.Request) error {
	qs, err := h.client.Queues(r.Context())
	if err != nil {
		return err
	}
	f, err := h.readFleet(r.Context())
	if err != nil {
		return err
	}
	charts, err := h.readCharts(r, "/", "")
	if err != nil {
		return err
	}
	return h.render(w, r, http.StatusOK, "overview", "Overview", f.Now,
		overviewPage{fleet: f, Queues: qs, Cap: pgqueue.Count{N: int64(h.client.CountCap())}, Charts: charts})
}
