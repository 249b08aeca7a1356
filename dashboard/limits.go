package dashboard

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jobfence/jobfence/queue/pgqueue"
)

// limits serves /limits: each flow-control limit, its use now and the jobs
// waiting on it, with a form to set one and buttons to delete (none when
// read-only).
func (h *handler) limits(w http.ResponseWriter, r *http.Request) error {
	uses, err := h.client.LimitUses(r.Context())
	if err != nil {
		return err
	}
	return h.render(w, r, http.StatusOK, "limits", "Limits", time.Time{}, uses)
}

// setLimit stores the limit the form describes; every instance applies it
// at its next grant.
func (h *handler) setLimit(r *http.Request, _ string) (string, []any, error) {
	l := pgqueue.Limit{
		Name: r.PostFormValue("name"), Queue: r.PostFormValue("queue"), Kind: r.PostFormValue("kind"),
		Sequence: r.PostFormValue("sequence") != "", OnFailure: pgqueue.FailurePolicy(r.PostFormValue("on_failure")),
	}
	for _, f := range strings.Split(r.PostFormValue("partition_by"), ",") {
		if f = strings.TrimSpace(f); f != "" {
			l.PartitionBy = append(l.PartitionBy, f)
		}
	}
	num := func(field string) (int, error) {
		v := strings.TrimSpace(r.PostFormValue(field))
		if v == "" {
			return 0, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, badRequest("%s is not a whole number", field)
		}
		return n, nil
	}
	l.FairBy = strings.TrimSpace(r.PostFormValue("fair_by"))
	var err error
	if l.FairWeights, err = pgqueue.ParseFairWeights(r.PostFormValue("fair_weights")); err != nil {
		return "", nil, badRequest("%s", err.Error())
	}
	if l.Concurrency, err = num("concurrency"); err != nil {
		return "", nil, err
	}
	if l.Rate, err = num("rate"); err != nil {
		return "", nil, err
	}
	if p := strings.TrimSpace(r.PostFormValue("period")); p != "" {
		if l.Period, err = time.ParseDuration(p); err != nil {
			return "", nil, badRequest("period is not a duration such as 1s or 1m")
		}
	}
	attrs := []any{"limit", l.Name, "queue", l.Queue, "concurrency", l.Concurrency, "rate", l.Rate, "period", l.Period}
	if err := h.client.SetLimit(r.Context(), l); err != nil {
		var ile *pgqueue.InvalidLimitError
		if errors.As(err, &ile) {
			return "", attrs, badRequest("%s", err.Error())
		}
		return "", attrs, err
	}
	return "/limits?done=limit-set", attrs, nil
}

// deleteLimit removes a limit; its waiting jobs are released.
func (h *handler) deleteLimit(r *http.Request, _ string) (string, []any, error) {
	name := r.PostFormValue("name")
	err := h.client.DeleteLimit(r.Context(), name)
	if errors.Is(err, pgqueue.ErrLimitNotFound) {
		err = &httpError{status: http.StatusNotFound, msg: err.Error()}
	}
	return "/limits?done=limit-deleted", []any{"limit", name}, err
}

// limitFlash says what a limit action that redirected here did, or "" for
// another outcome.
func limitFlash(done string) string {
	switch done {
	case "limit-set":
		return "The limit is set: every instance applies it at its next grant, within about a second."
	case "limit-deleted":
		return "The limit is deleted: its waiting jobs are released within about a second."
	}
	return ""
}
