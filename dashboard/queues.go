package dashboard

import (
	"net/http"
	"net/url"
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

// queuePage is /queues/{name}'s data.
type queuePage struct {
	Queue pgqueue.QueueInfo
	// Known reports that the queue has jobs or a pause (Queues lists it);
	// a queue without either still has its charts.
	Known  bool
	Charts chartsView
}

// queue serves /queues/{name}: one queue's counts and pause, and its
// charts over time, by kind as filtered.
func (h *handler) queue(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	qs, err := h.client.Queues(r.Context())
	if err != nil {
		return err
	}
	p := queuePage{Queue: pgqueue.QueueInfo{Name: name}}
	for _, q := range qs {
		if q.Name == name {
			p.Queue, p.Known = q, true
		}
	}
	if p.Charts, err = h.readCharts(r, "/queues/"+url.PathEscape(name), name); err != nil {
		return err
	}
	return h.render(w, r, http.StatusOK, "queue", "Queue "+name, time.Now(), p)
}
