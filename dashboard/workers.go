package dashboard

import (
	"net/http"
	"time"

	"github.com/jobfence/jobfence/queue/pgqueue"
)

// workersPage is /workers' data.
type workersPage struct {
	Workers []pgqueue.WorkerInfo
	// Live counts the workers reporting now.
	Live int
}

// workers serves /workers: the registered worker instances, live ones and
// those that stopped reporting recently.
func (h *handler) workers(w http.ResponseWriter, r *http.Request) error {
	ws, err := h.client.Workers(r.Context())
	if err != nil {
		return err
	}
	p := workersPage{Workers: ws}
	for _, wi := range ws {
		if wi.Live {
			p.Live++
		}
	}
	return h.render(w, r, http.StatusOK, "workers", "Workers", time.Time{}, p)
}
