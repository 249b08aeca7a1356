package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// ErrReadOnly reports an action on a read-only dashboard.
var ErrReadOnly = errors.New("dashboard: refused: this dashboard is read-only (Options.ReadOnly, jobfence ui --read-only); actions are turned off")

// actionFunc performs one action for actor and returns where to send the
// browser next (a path under the base, with its done= flash) and what to
// log about what it did.
type actionFunc func(r *http.Request, actor string) (to string, attrs []any, err error)

// action adapts f: it is refused on a read-only dashboard and without the
// form's CSRF token, logged with who asked for it whatever its outcome,
// and answered with a redirect (POST, redirect, GET) so that reloading the
// page does not repeat it.
func (h *handler) action(f actionFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		actor := h.opts.Actor(r)
		name := strings.TrimPrefix(r.Pattern, "POST ")
		refuse := func(err error) {
			h.log.Warn("dashboard: action refused", "action", name, "path", r.URL.Path, "by", actor, "reason", err.Error())
			h.fail(w, r, &httpError{status: http.StatusForbidden, msg: err.Error()})
		}
		if h.opts.ReadOnly {
			refuse(ErrReadOnly)
			return
		}
		if err := h.csrf.check(r); err != nil {
			refuse(err)
			return
		}
		to, attrs, err := f(r, actor)
		if err != nil {
			h.log.Warn("dashboard: action failed", append([]any{"action", name, "path", r.URL.Path, "by", actor, "error", err.Error()}, attrs...)...)
			h.fail(w, r, actionError(err))
			return
		}
		h.log.Info("dashboard: action", append([]any{"action", name, "path", r.URL.Path, "by", actor}, attrs...)...)
		http.Redirect(w, r, h.opts.BasePath+to, http.StatusSeeOther)
	}
}

// actionError gives err the status it deserves: a job that is not there
// 404, bad input 400, a database that failed 500 (and a timeout 504), and
// anything else, a job whose state does not allow the action, 409.
func actionError(err error) error {
	var he *httpError
	var pgErr *pgconn.PgError
	status := http.StatusConflict
	switch {
	case errors.As(err, &he), errors.Is(err, queue.ErrJobNotFound), errors.Is(err, queue.ErrWorkflowNotFound):
		return err
	case errors.Is(err, queue.ErrUnknownState), errors.Is(err, pgqueue.ErrNoQueueName),
		errors.Is(err, queue.ErrBadConcurrency), errors.Is(err, pgqueue.ErrUnknownQueue):
		status = http.StatusBadRequest
	case errors.Is(err, context.DeadlineExceeded), pgconn.Timeout(err):
		status = http.StatusGatewayTimeout
	case errors.As(err, &pgErr), pgconn.SafeToRetry(err):
		status = http.StatusInternalServerError
	}
	return &httpError{status: status, msg: err.Error()}
}

// jobID reads the {id} of the request's path.
func jobID(r *http.Request) (int64, error) {
	return parseJobID(r.PathValue("id"))
}

// parseJobID reads a job ID typed or linked by a user.
func parseJobID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, badRequest("job ID %q is not a number", s)
	}
	return id, nil
}

func (h *handler) retryJob(r *http.Request, _ string) (string, []any, error) {
	id, err := jobID(r)
	if err != nil {
		return "", nil, err
	}
	force := r.PostFormValue("force") == "1"
	attrs := []any{"job", id, "force", force}
	if force {
		err = h.client.RetryForce(r.Context(), id)
	} else {
		err = h.client.Retry(r.Context(), id)
	}
	if errors.Is(err, pgqueue.ErrJobCompleted) {
		err = fmt.Errorf("%w: tick \"run it again\" to retry it anyway", err)
	}
	return fmt.Sprintf("/jobs/%d?done=retried", id), attrs, err
}

func (h *handler) cancelJob(r *http.Request, _ string) (string, []any, error) {
	id, err := jobID(r)
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("/jobs/%d?done=cancelled", id), []any{"job", id}, h.client.Cancel(r.Context(), id)
}

func (h *handler) deleteJob(r *http.Request, _ string) (string, []any, error) {
	id, err := jobID(r)
	if err != nil {
		return "", nil, err
	}
	return "/jobs?done=deleted", []any{"job", id}, h.client.Delete(r.Context(), id)
}

// bulkParams reads a bulk action's filter from its form.
func bulkParams(r *http.Request) (pgqueue.BulkParams, error) {
	p := pgqueue.BulkParams{Queue: r.PostFormValue("queue"), Kind: r.PostFormValue("kind")}
	if s := r.PostFormValue("state"); s != "" {
		st, err := queue.ParseState(s)
		if err != nil {
			return p, badRequest("%v", err)
		}
		p.State = st
	}
	return p, nil
}

// bulkDone is where a bulk action sends the browser: the job list it was
// started from, saying how many jobs it changed.
func bulkDone(p pgqueue.BulkParams, done string, n int64) string {
	v := jobFilter{Queue: p.Queue, Kind: p.Kind, State: string(p.State)}.query()
	v.Set("done", done)
	v.Set("n", strconv.FormatInt(n, 10))
	return "/jobs?" + v.Encode()
}

func (h *handler) retryMatching(r *http.Request, _ string) (string, []any, error) {
	p, err := bulkParams(r)
	if err != nil {
		return "", nil, err
	}
	n, err := h.client.RetryMatching(r.Context(), p)
	return bulkDone(p, "retried-n", n), []any{"queue", p.Queue, "kind", p.Kind, "state", p.State, "jobs", n}, err
}

func (h *handler) deleteMatching(r *http.Request, _ string) (string, []any, error) {
	p, err := bulkParams(r)
	if err != nil {
		return "", nil, err
	}
	n, err := h.client.DeleteMatching(r.Context(), p)
	return bulkDone(p, "deleted-n", n), []any{"queue", p.Queue, "kind", p.Kind, "state", p.State, "jobs", n}, err
}

func (h *handler) pauseQueue(r *http.Request, actor string) (string, []any, error) {
	q := r.PostFormValue("queue")
	return "/queues?done=paused", []any{"queue", q}, h.client.PauseQueue(r.Context(), q, actor)
}

func (h *handler) resumeQueue(r *http.Request, actor string) (string, []any, error) {
	q := r.PostFormValue("queue")
	return "/queues?done=resumed", []any{"queue", q}, h.client.ResumeQueue(r.Context(), q, actor)
}

// fleetQueue changes a queue's stored fleet setting: the form's op is
// set, add, remove or reset, and set and add take its concurrency.
func (h *handler) fleetQueue(r *http.Request, actor string) (string, []any, error) {
	q, op := r.PostFormValue("queue"), r.PostFormValue("op")
	attrs := []any{"queue", q, "op", op}
	var n int
	if op == "set" || op == "add" {
		s := strings.TrimSpace(r.PostFormValue("concurrency"))
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			return "", attrs, badRequest("concurrency %q is not a whole number", s)
		}
		attrs = append(attrs, "concurrency", n)
	}
	var err error
	switch op {
	case "set":
		err = h.client.SetQueueConcurrency(r.Context(), q, n, actor)
	case "add":
		err = h.client.StartQueue(r.Context(), q, n, actor)
	case "remove":
		err = h.client.StopQueue(r.Context(), q, actor)
	case "reset":
		err = h.client.ResetQueue(r.Context(), q, actor)
	default:
		return "", attrs, badRequest("unknown queue operation %q: want set, add, remove or reset", op)
	}
	return "/queues?done=fleet-" + op, attrs, err
}

// flash says what the action that redirected here did. It knows a fixed
// set of outcomes, so a link cannot make the page say anything else.
func flash(r *http.Request) string {
	n, _ := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
	switch r.URL.Query().Get("done") {
	case "inserted":
		return "The job is inserted."
	case "retried":
		return "The job will run again now."
	case "cancelled":
		return "The job is cancelled."
	case "deleted":
		return "The job is deleted."
	case "retried-n":
		return fmt.Sprintf("Retried %d jobs.", n)
	case "deleted-n":
		return fmt.Sprintf("Deleted %d jobs.", n)
	case "paused":
		return "The queue is paused: workers stop claiming its jobs within about a second; running jobs finish."
	case "resumed":
		return "The queue is resumed."
	case "fleet-set":
		return "The queue's concurrency is set: every worker that works it follows within about a second; running jobs go on."
	case "fleet-add":
		return "The queue is added: workers with FleetQueues start it within about a second, at its concurrency."
	case "fleet-remove":
		return "The queue is removed: every worker stops claiming its jobs within about a second; running jobs finish."
	case "fleet-reset":
		return "The queue's fleet setting is cleared: every worker goes back to its own configuration."
	}
	if s := limitFlash(r.URL.Query().Get("done")); s != "" {
		return s
	}
	return scheduleFlash(r.URL.Query().Get("done"), n)
}
