package dashboard

import (
	"net/http"
)

// overview serves /: every queue's counts, recent completions, oldest
// waiting job and pause, and the fleet's live workers and stale outcomes.
func (h *handler) overview(w http.ResponseWriter, r *http.Request) error {
	s, err := h.readSummary(r.Context())
	if err != nil {
		return err
	}
	return h.render(w, r, http.StatusOK, "overview", "Overview", s.Now, s)
}
