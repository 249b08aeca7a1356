package dashboard

import (
	"net/http"
	"time"

	"github.com/jobfence/jobfence/queue/pgqueue"
)

// queuesPage is /queues' data.
type queuesPage struct {
	Queues []pgqueue.QueueInfo
}

// queues serves /queues: every queue with its jobs in each state, its
// oldest waiting job, and whether (since when, by whom) it is paused,
// with pause and resume buttons.
func (h *handler) queues(w http.ResponseWriter, r *http.Request) error {
	qs, err := h.client.Queues(r.Context())
	if err != nil {
		return err
	}
	return h.render(w, r, http.StatusOK, "queues", "Queues", time.Time{}, queuesPage{Queues: qs})
}
