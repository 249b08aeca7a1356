package dashboard

import (
	"context"
	"crypto/rand"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// DefaultTimeout is the default of Options.Timeout.
const DefaultTimeout = 10 * time.Second

// Options tunes New. The zero value serves a dashboard at the root path
// that allows actions.
type Options struct {
	// BasePath is the path the handler is mounted under, such as
	// "/admin/jobs": links and the CSRF cookie are scoped to it, and the
	// handler strips it from request paths itself, so mount the handler
	// at BasePath and at BasePath + "/". Empty means the root.
	BasePath string
	// ReadOnly refuses every action with 403 Forbidden and hides the
	// buttons: for on-call access that may look but not change.
	ReadOnly bool
	// Logger receives one line per action, naming who made it; nil means
	// slog.Default().
	Logger *slog.Logger
	// Actor names who made a request, for the action log and for the
	// "paused by" of a queue. Nil means the basic-auth user name when the
	// request carries one, otherwise the client's address. A service that
	// authenticates users itself returns its user's name.
	Actor func(*http.Request) string
	// CSRFKey signs the CSRF tokens of the forms. Instances of a service
	// behind one load balancer must share it (a form rendered by one is
	// posted to another); empty means a random key per New, which suits a
	// single process such as `jobfence ui`.
	CSRFKey []byte
	// Timeout bounds the database work of each request. Zero means
	// DefaultTimeout.
	Timeout time.Duration
	// Encryption, when set, shows the args of jobs stored encrypted in
	// clear to everyone who can see the dashboard; nil shows them as
	// "encrypted (key ID)". Give it only to a dashboard whose viewers may
	// read the args. See docs/encryption.md.
	Encryption *queue.KeyRing

	// countCap is pgqueue.Config.CountCap for the overview's and the
	// queues page's counts; zero means pgqueue.DefaultCountCap. Tests set
	// it low so that a few jobs show what a million would.
	countCap int
}

// handler is the dashboard: its options, its database and its pages.
type handler struct {
	pool   *pgxpool.Pool
	client *pgqueue.Client
	opts   Options
	log    *slog.Logger
	csrf   csrf
	pages  *pages
	mux    *http.ServeMux
}

// New returns the dashboard on pool, a pool on a database migrated for
// jobfence. The handler serves its pages under opts.BasePath.
func New(pool *pgxpool.Pool, opts Options) http.Handler {
	opts.BasePath = "/" + strings.Trim(opts.BasePath, "/")
	if opts.BasePath == "/" {
		opts.BasePath = ""
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Actor == nil {
		opts.Actor = defaultActor
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	key := opts.CSRFKey
	if len(key) == 0 {
		key = []byte(rand.Text())
	}
	h := &handler{
		pool:   pool,
		client: pgqueue.New(pool, pgqueue.Config{Logger: opts.Logger, CountCap: opts.countCap}),
		opts:   opts,
		log:    opts.Logger,
		csrf:   csrf{key: key, path: opts.BasePath + "/"},
		pages:  parsePages(),
		mux:    http.NewServeMux(),
	}
	h.routes()
	return h
}

func (h *handler) routes() {
	get := func(pattern string, f func(w http.ResponseWriter, r *http.Request) error) {
		h.mux.HandleFunc("GET "+pattern, h.page(f))
	}
	get("/{$}", h.overview)
	get("/jobs", h.jobs)
	get("/jobs/new", h.newJob)
	get("/jobs/{id}", h.job)
	get("/queues", h.queues)
	get("/queues/{name}", h.queue)
	get("/schedules", h.schedules)
	get("/workers", h.workers)
	get("/keys", h.keys)
	get("/limits", h.limits)
	get("/workflows", h.workflows)
	get("/workflows/{id}", h.workflow)
	h.mux.HandleFunc("GET /metrics", h.metrics)
	h.mux.Handle("GET /static/", staticHandler())

	post := func(pattern string, f actionFunc) {
		h.mux.HandleFunc("POST "+pattern, h.action(f))
	}
	post("/jobs", h.insertJob)
	post("/jobs/{id}/retry", h.retryJob)
	post("/jobs/{id}/cancel", h.cancelJob)
	post("/jobs/{id}/delete", h.deleteJob)
	post("/jobs/retry", h.retryMatching)
	post("/jobs/delete", h.deleteMatching)
	post("/queues/pause", h.pauseQueue)
	post("/queues/resume", h.resumeQueue)
	post("/queues/fleet", h.fleetQueue)
	post("/schedules/pause", h.pauseSchedule)
	post("/schedules/resume", h.resumeSchedule)
	post("/schedules/trigger", h.triggerSchedule)
	post("/limits/set", h.setLimit)
	post("/limits/delete", h.deleteLimit)
	post("/workflows/{id}/cancel", h.cancelWorkflow)
	post("/workflows/{id}/retry", h.retryWorkflow)
	h.mux.HandleFunc("/", h.notFound)
}

// ServeHTTP serves the dashboard's path under BasePath with its security
// headers; other paths are not found.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	setSecurityHeaders(w.Header())
	if h.opts.BasePath != "" {
		if r.URL.Path == h.opts.BasePath {
			http.Redirect(w, r, h.opts.BasePath+"/", http.StatusMovedPermanently)
			return
		}
		rest, ok := strings.CutPrefix(r.URL.Path, h.opts.BasePath+"/")
		if !ok {
			http.NotFound(w, r)
			return
		}
		u := *r.URL
		u.Path, u.RawPath = "/"+rest, ""
		r = r.Clone(r.Context())
		r.URL = &u
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.Timeout)
	defer cancel()
	h.mux.ServeHTTP(w, r.WithContext(ctx))
}

// setSecurityHeaders forbids inline scripts and styles, framing (click-
// jacking an action button), MIME sniffing and referrers, and caching of
// pages that show job data.
func setSecurityHeaders(hd http.Header) {
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
		"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cross-Origin-Opener-Policy", "same-origin")
	hd.Set("Cache-Control", "no-store")
}

// defaultActor is the basic-auth user, or the client's address.
func defaultActor(r *http.Request) string {
	if u, _, ok := r.BasicAuth(); ok && u != "" {
		return u
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "anonymous@" + host
}
