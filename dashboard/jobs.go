package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// jobsPageSize is how many jobs one page of /jobs shows.
const jobsPageSize = 50

// jobFilter is the /jobs form: what it filters by, as the user typed it.
// PutBack is empty or putBackUnknownKind.
type jobFilter struct {
	State, Queue, Kind, ID, Key, PutBack string
	// Tag and Args search (pgqueue.ListParams.Tag, .Args): Args is a
	// JSON object the jobs' args must contain.
	Tag, Args string
}

// putBackUnknownKind is the putback= filter of the jobs waiting for a
// worker that knows their kind (pgqueue.ListParams.UnknownKind).
const putBackUnknownKind = "unknown-kind"

// query is the filter as a query string, for paging links and the bulk
// actions' return.
func (f jobFilter) query() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"state": f.State, "queue": f.Queue, "kind": f.Kind, "key": f.Key, "putback": f.PutBack,
		"tag": f.Tag, "args": f.Args} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

// jobsPage is /jobs' data.
type jobsPage struct {
	Filter jobFilter
	Jobs   []*queue.Job
	// Newer and Older are the links to the neighbouring pages, empty
	// when there is none; Newest is the filter's first page.
	Newer, Older, Newest string
	// Bulk says whether the bulk actions apply: the filter selects a set
	// by queue, kind and state only (not one job by its unique key, nor
	// put-backs, tags or args, which the actions do not select by).
	Bulk bool
	// TooWide is the message of a search that read its bound of jobs
	// without filling the page (pgqueue.ScanLimitError); Older then
	// goes on from where it stopped.
	TooWide string
}

// jobs serves /jobs: the jobs that match the filter, newest first, a page
// at a time by keyset (before= and after= IDs, never OFFSET).
func (h *handler) jobs(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	f := jobFilter{State: q.Get("state"), Queue: q.Get("queue"), Kind: q.Get("kind"), ID: strings.TrimSpace(q.Get("id")), Key: q.Get("key"),
		PutBack: q.Get("putback"), Tag: strings.TrimSpace(q.Get("tag")), Args: strings.TrimSpace(q.Get("args"))}
	if f.ID != "" {
		id, err := parseJobID(f.ID)
		if err != nil {
			return err
		}
		http.Redirect(w, r, fmt.Sprintf("%s/jobs/%d", h.opts.BasePath, id), http.StatusSeeOther)
		return nil
	}
	p := pgqueue.ListParams{Queue: f.Queue, Kind: f.Kind, UniqueKey: f.Key, Tag: f.Tag, Limit: jobsPageSize + 1}
	if f.Args != "" {
		p.Args = []byte(f.Args)
	}
	switch f.PutBack {
	case "":
	case putBackUnknownKind:
		p.UnknownKind = true
	default:
		return badRequest("putback=%q: the only put-back filter is %s", f.PutBack, putBackUnknownKind)
	}
	if f.State != "" {
		st, err := queue.ParseState(f.State)
		if err != nil {
			return badRequest("%v", err)
		}
		p.State = st
	}
	for name, dst := range map[string]*int64{"before": &p.Before, "after": &p.After} {
		if s := q.Get(name); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n <= 0 {
				return badRequest("%s=%q is not a job ID", name, s)
			}
			*dst = n
		}
	}
	jobs, err := h.client.List(r.Context(), p)
	if errors.Is(err, pgqueue.ErrBadListParams) {
		return badRequest("%v", err)
	}
	var tooWide *pgqueue.ScanLimitError
	if err != nil && !errors.As(err, &tooWide) {
		return err
	}
	page := jobsPage{Filter: f, Bulk: f.Key == "" && f.PutBack == "" && f.Tag == "" && f.Args == "",
		Newest: h.opts.BasePath + "/jobs?" + f.query().Encode()}
	// One job more than a page says whether there is a page beyond: older
	// ones for a first or before= page, newer ones for an after= page.
	more := len(jobs) > jobsPageSize
	if more && p.After > 0 {
		jobs = jobs[1:]
	} else if more {
		jobs = jobs[:jobsPageSize]
	}
	for _, j := range jobs {
		j.EncodedArgs = h.opts.Encryption.Show(j.Kind, j.EncodedArgs)
	}
	page.Jobs = jobs
	link := func(k string, id int64) string {
		v := f.query()
		v.Set(k, strconv.FormatInt(id, 10))
		return h.opts.BasePath + "/jobs?" + v.Encode()
	}
	if len(jobs) > 0 {
		if (p.After == 0 && more) || p.After > 0 {
			page.Older = link("before", jobs[len(jobs)-1].ID)
		}
		if p.Before > 0 || (p.After > 0 && more) {
			page.Newer = link("after", jobs[0].ID)
		}
	}
	if tooWide != nil {
		page.TooWide = fmt.Sprintf("This search read %d jobs without filling the page; narrow it (queue, kind, state, tag) or go on with older jobs.",
			tooWide.Scanned)
		if tooWide.Ascending {
			page.Newer = link("after", tooWide.Next)
		} else {
			page.Older = link("before", tooWide.Next)
		}
	}
	return h.render(w, r, http.StatusOK, "jobs", "Jobs", time.Time{}, page)
}

// lastError is the text of the job's latest attempt error, on one line.
func lastError(j *queue.Job) string {
	if len(j.Errors) == 0 {
		return ""
	}
	return strings.Join(strings.Fields(j.Errors[len(j.Errors)-1].Error), " ")
}

// event is one line of a job's timeline.
type event struct {
	At   time.Time
	What string
	// Error, when set, is the attempt's error and Trace its panic stack.
	Error, Trace string
}

// jobPage is /jobs/{id}'s data.
type jobPage struct {
	Job         *queue.Job
	FinalizedAt time.Time
	// Attempts are the attempts that failed or stored logs, each with
	// its error and its logs, newest first.
	Attempts []attemptView
	Timeline []event
	// Waits says why a limited job waits for its limit (WaitReason).
	Waits string
	// Unique is what makes the job unique by its UniqueOpts; nil when
	// they did not (Job.UniqueKey is an explicit key).
	Unique *uniqueness
	// CanRetry, CanCancel and CanDelete say which actions its state allows.
	CanRetry, CanCancel, CanDelete bool
	// Children are the child workflows the job started
	// (workflow.StartChild).
	Children []pgqueue.ChildWorkflow
}

// jobRowSQL reads what the job's page shows beyond queue.Job: when it
// ended, and the unique key its UniqueOpts computed with its states.
const jobRowSQL = `SELECT finalized_at, unique_hash, unique_states FROM jobfence_jobs WHERE id = $1
UNION ALL
SELECT finalized_at, unique_hash, unique_states FROM jobfence_jobs_finished WHERE id = $1
LIMIT 1`

// job serves /jobs/{id}: the job, its arguments, every attempt with its
// error and stack, and a timeline.
func (h *handler) job(w http.ResponseWriter, r *http.Request) error {
	id, err := jobID(r)
	if err != nil {
		return err
	}
	j, err := h.client.Get(r.Context(), id)
	if err != nil {
		return err
	}
	var (
		finalized *time.Time
		hash      []byte
		mask      *int16
	)
	if err := h.pool.QueryRow(r.Context(), jobRowSQL, id).Scan(&finalized, &hash, &mask); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("dashboard: job %d: %w", id, err)
	}
	// Encrypted args are shown in clear only with the key (Options.Encryption).
	key, sealed := queue.SealedKey(j.EncodedArgs)
	j.EncodedArgs = h.opts.Encryption.Show(j.Kind, j.EncodedArgs)
	opened := sealed && string(j.EncodedArgs) != queue.DescribeSealed(key)
	unique, err := h.readUniqueness(r.Context(), j, hash, mask, sealed, opened)
	if err != nil {
		return err
	}
	p := jobPage{
		Job:       j,
		Unique:    unique,
		Attempts:  attemptViews(j),
		CanRetry:  j.State != queue.StateRunning,
		CanCancel: !j.State.Final(),
		CanDelete: j.State != queue.StateRunning,
	}
	if finalized != nil {
		p.FinalizedAt = *finalized
	}
	if j.State == queue.StateLimited {
		if p.Waits, err = h.client.WaitReason(r.Context(), id); err != nil {
			return err
		}
	}
	if p.Children, err = h.client.ChildWorkflows(r.Context(), id); err != nil {
		return err
	}
	p.Timeline = timeline(j, p.FinalizedAt)
	return h.render(w, r, http.StatusOK, "job", fmt.Sprintf("Job %d", id), time.Time{}, p)
}

// attemptView is one attempt on the job's page: its error (nil for an
// attempt that did not fail) and the logs it stored (worker.Logger).
type attemptView struct {
	Attempt int
	Error   *queue.AttemptError
	Logs    []queue.AttemptLogs
}

// attemptViews pairs the job's attempts' errors with their logs, newest
// first. An attempt's logs go with the last error of its number (a
// put-back runs the number again, and its run's error comes after the
// put-back's); logs of an attempt without an error (it completed, or it
// runs) make an entry of their own.
func attemptViews(j *queue.Job) []attemptView {
	views := make([]attemptView, 0, len(j.Errors)+len(j.Logs))
	for i := range j.Errors {
		views = append(views, attemptView{Attempt: j.Errors[i].Attempt, Error: &j.Errors[i]})
	}
	for _, l := range j.Logs {
		at := -1
		for i := len(views) - 1; i >= 0; i-- {
			if views[i].Attempt == l.Attempt {
				at = i
				break
			}
		}
		if at < 0 {
			views = append(views, attemptView{Attempt: l.Attempt})
			at = len(views) - 1
		}
		views[at].Logs = append(views[at].Logs, l)
	}
	// Oldest first, stable: errors are in order, and an attempt's entry
	// without an error comes after the errors of earlier attempts.
	slices.SortStableFunc(views, func(a, b attemptView) int { return a.Attempt - b.Attempt })
	slices.Reverse(views)
	return views
}

// timeline orders what is known of the job's life: enqueued, due, each
// failed attempt, the last claim, its lease, and its end.
func timeline(j *queue.Job, finalized time.Time) []event {
	ev := []event{{At: j.CreatedAt, What: "enqueued"}}
	if j.ScheduledAt.Sub(j.CreatedAt) > time.Second || j.ScheduledAt.Before(j.CreatedAt) {
		ev = append(ev, event{At: j.ScheduledAt, What: "due"})
	}
	for _, e := range j.Errors {
		what := fmt.Sprintf("attempt %d failed", e.Attempt)
		if e.PutBack {
			what = fmt.Sprintf("attempt %d put back (not spent)", e.Attempt)
		}
		ev = append(ev, event{At: e.At, What: what, Error: e.Error, Trace: e.Trace})
	}
	if !j.AttemptedAt.IsZero() {
		by := ""
		if n := len(j.AttemptedBy); n > 0 {
			by = " by " + j.AttemptedBy[n-1]
		}
		ev = append(ev, event{At: j.AttemptedAt, What: fmt.Sprintf("attempt %d claimed%s with fence %d", j.Attempt, by, j.Fence)})
	}
	if j.State == queue.StateRunning && !j.LeaseExpiresAt.IsZero() {
		ev = append(ev, event{At: j.LeaseExpiresAt, What: "lease expires unless extended"})
	}
	if !finalized.IsZero() {
		ev = append(ev, event{At: finalized, What: string(j.State)})
	}
	slices.SortStableFunc(ev, func(a, b event) int { return a.At.Compare(b.At) })
	return ev
}
