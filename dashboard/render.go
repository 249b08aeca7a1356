package dashboard

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// pages holds one template set per page: the layout with that page's
// "content".
type pages struct {
	byName map[string]*template.Template
}

// parsePages parses the embedded templates. They are part of the binary,
// so a parse error is a bug that every test of the package finds.
func parsePages() *pages {
	funcs := template.FuncMap{
		"ts":             formatTime,
		"clock":          clock,
		"ago":            ago,
		"pretty":         prettyJSON,
		"states":         queue.States,
		"maxConcurrency": func() int { return queue.MaxConcurrency },
		"lastError":      lastError,
		"short":          short,
		"navItems":       navItems,
		"stateCounts":    stateCounts,
		"fairWeights":    pgqueue.FormatFairWeights,
	}
	layout := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html"))
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		panic(err)
	}
	p := &pages{byName: map[string]*template.Template{}}
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		p.byName[name] = template.Must(template.Must(layout.Clone()).ParseFS(templateFS, n))
	}
	return p
}

func staticHandler() http.Handler {
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err)
	}
	files := http.StripPrefix("/static/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		files.ServeHTTP(w, r)
	})
}

// navItem is one link of the navigation bar: Page is the name of the
// page's template, which marks the current page's link.
type navItem struct{ Page, Path, Label string }

func navItems() []navItem {
	return []navItem{
		{"overview", "/", "Overview"}, {"jobs", "/jobs", "Jobs"}, {"queues", "/queues", "Queues"},
		{"schedules", "/schedules", "Schedules"}, {"workers", "/workers", "Workers"}, {"limits", "/limits", "Limits"}, {"keys", "/keys", "Keys"},
		{"workflows", "/workflows", "Workflows"},
	}
}

// view is what every page's template gets: the layout's fields and the
// page's own Data.
type view struct {
	Base     string
	Title    string
	Nav      string
	CSRF     string
	ReadOnly bool
	// Flash says what the last action did, after its redirect.
	Flash string
	// Now is the database's clock where the page read it, else this
	// process's: ages are measured from it.
	Now  time.Time
	Data any
}

// render writes page name with data. The page is rendered to a buffer
// first, so a failure shows an error page rather than half a page.
func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, name, title string, now time.Time, data any) error {
	t, ok := h.pages.byName[name]
	if !ok {
		return fmt.Errorf("dashboard: no page %q", name)
	}
	if now.IsZero() {
		now = time.Now()
	}
	v := view{
		Base: h.opts.BasePath, Title: title, Nav: name, CSRF: h.csrf.token(w, r),
		ReadOnly: h.opts.ReadOnly, Flash: flash(r), Now: now, Data: data,
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", v); err != nil {
		return fmt.Errorf("dashboard: render %s: %w", name, err)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, err := w.Write(buf.Bytes())
	return err
}

// httpError is an error shown to the user with its status.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &httpError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// page adapts a page's function to an http.HandlerFunc that shows its
// error, if any, as an error page.
func (h *handler) page(f func(w http.ResponseWriter, r *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := f(w, r); err != nil {
			h.fail(w, r, err)
		}
	}
}

// fail shows err on an error page: user errors with their status, a
// missing job as 404, anything else as 500, logged.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	var he *httpError
	switch {
	case errors.As(err, &he):
		status = he.status
	case errors.Is(err, queue.ErrJobNotFound), errors.Is(err, queue.ErrWorkflowNotFound):
		status = http.StatusNotFound
	default:
		h.log.Error("dashboard: request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	}
	if rerr := h.render(w, r, status, "error", http.StatusText(status), time.Time{}, err.Error()); rerr != nil {
		http.Error(w, err.Error(), status)
	}
}

func (h *handler) notFound(w http.ResponseWriter, r *http.Request) {
	h.fail(w, r, &httpError{status: http.StatusNotFound, msg: "no such page: " + r.URL.Path})
}

// formatTime prints t in UTC to the second, or "-" for the zero time.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// clock is t's time of day, to the millisecond, in UTC: a log record's
// time beside its attempt's date.
func clock(t time.Time) string {
	return t.UTC().Format("15:04:05.000")
}

// ago says how long before now t was ("3m12s ago"), or how long after
// ("in 40s"); "-" for the zero time.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	if d < 0 {
		return "in " + roundDuration(-d)
	}
	return roundDuration(d) + " ago"
}

// roundDuration keeps the two largest units that matter to a reader.
func roundDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 48*time.Hour:
		return d.Round(time.Minute).String()
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

// shortLen is how many characters of a job's arguments a list shows.
const shortLen = 160

// short is the start of b for a table cell: arguments may be megabytes.
func short(b []byte) string {
	n := 0
	for i := range string(b) {
		if n == shortLen {
			return string(b[:i]) + "…"
		}
		n++
	}
	return string(b)
}

// prettyJSON indents JSON for reading; text that is not JSON is returned
// as it is. Either way the template escapes it.
func prettyJSON(b []byte) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		return string(b)
	}
	return buf.String()
}

// stateCounts writes counts as "completed 3, pending 1", in the order of
// queue.States.
func stateCounts(counts map[queue.State]int64) string {
	var parts []string
	for _, s := range queue.States() {
		if n := counts[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", s, n))
		}
	}
	return strings.Join(parts, ", ")
}
