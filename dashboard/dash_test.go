package dashboard_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/dashboard"
	"github.com/jobfence/jobfence/internal/logbuf"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// dash is a dashboard on a test schema, served over HTTP, with a browser-
// like client that keeps cookies and does not follow redirects.
type dash struct {
	t      *testing.T
	db     *pgtest.DB
	q      *pgqueue.Client
	srv    *httptest.Server
	client *http.Client
	// URL is where the dashboard is: the server's URL and the base path.
	URL string
	// Log holds the dashboard's log lines.
	Log *logbuf.Buffer
}

// newDash starts a dashboard with opts (its Logger is set to Log).
func newDash(t *testing.T, opts dashboard.Options) *dash {
	t.Helper()
	db := pgtest.New(t)
	d := &dash{t: t, db: db, q: pgqueue.New(db.Pool, pgqueue.Config{}), Log: &logbuf.Buffer{}}
	opts.Logger = slog.New(slog.NewTextHandler(d.Log, nil))
	h := dashboard.New(db.Pool, opts)
	mux := http.NewServeMux()
	base := strings.TrimRight("/"+strings.Trim(opts.BasePath, "/"), "/")
	mux.Handle(base+"/", h)
	if base != "" {
		mux.Handle(base, h)
	}
	d.srv = httptest.NewServer(mux)
	t.Cleanup(d.srv.Close)
	jar, _ := cookiejar.New(nil)
	d.client = &http.Client{
		Jar:           jar,
		Timeout:       30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	d.URL = d.srv.URL + base
	return d
}

// get fetches path (under the base) and returns the status and body.
func (d *dash) get(path string) (int, string) {
	d.t.Helper()
	resp, err := d.client.Get(d.URL + path)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// getOK fetches path and fails the test unless it answers 200.
func (d *dash) getOK(path string) string {
	d.t.Helper()
	code, body := d.get(path)
	if code != http.StatusOK {
		d.t.Fatalf("GET %s = %d, want 200:\n%s", path, code, body)
	}
	return body
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// token reads a page and returns the CSRF token of its forms (the page
// sets the cookie it belongs to).
func (d *dash) token(path string) string {
	d.t.Helper()
	m := csrfRE.FindStringSubmatch(d.getOK(path))
	if m == nil {
		d.t.Fatalf("GET %s: no CSRF token in the page", path)
	}
	return m[1]
}

// post posts form to path and returns the response's status, Location
// and body.
func (d *dash) post(path string, form url.Values) (int, string, string) {
	d.t.Helper()
	resp, err := d.client.PostForm(d.URL+path, form)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Location"), string(b)
}

// enqueue adds a job and returns its ID.
func (d *dash) enqueue(p queue.EnqueueParams) int64 {
	d.t.Helper()
	res, err := d.q.Enqueue(context.Background(), p)
	if err != nil {
		d.t.Fatal(err)
	}
	return res.ID
}

// claim claims up to n jobs of q.
func (d *dash) claim(q string, n int) []*queue.Job {
	d.t.Helper()
	jobs, err := d.q.Claim(context.Background(), queue.ClaimParams{Queue: q, Limit: n, Lease: time.Minute, WorkerID: "test-worker"})
	if err != nil {
		d.t.Fatal(err)
	}
	return jobs
}

// finish reports outcome for j, with err as its attempt error if set.
func (d *dash) finish(j *queue.Job, o queue.Outcome, err *queue.AttemptError) {
	d.t.Helper()
	if _, ferr := d.q.Finish(context.Background(), []queue.Finish{{Lease: j.Lease(), Outcome: o, Error: err}}); ferr != nil {
		d.t.Fatal(ferr)
	}
}

// state returns job id's state.
func (d *dash) state(id int64) queue.State {
	d.t.Helper()
	j, err := d.q.Get(context.Background(), id)
	if err != nil {
		d.t.Fatal(err)
	}
	return j.State
}

// mustContain fails unless body contains every one of want.
func mustContain(t *testing.T, what, body string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("%s lacks %q", what, w)
		}
	}
}

// encKey is the dashboard tests' key k1.
var encKey = bytes.Repeat([]byte{'E'}, queue.KeySize)

// encRing is a key ring of encKey alone, as k1.
func encRing(t *testing.T) *queue.KeyRing {
	t.Helper()
	r, err := queue.NewKeyRing(queue.Encryption{Keys: map[string][]byte{"k1": encKey}, Current: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// enqueueEncrypted adds a job of kind pay with args sealed under k1 and
// returns its ID.
func (d *dash) enqueueEncrypted(args string) int64 {
	d.t.Helper()
	c := pgqueue.New(d.db.Pool, pgqueue.Config{Encryption: encRing(d.t)})
	res, err := c.Enqueue(context.Background(), queue.EnqueueParams{Kind: "pay", Args: []byte(args), Encrypt: true,
		Unique: &queue.UniqueOpts{ByArgs: true}})
	if err != nil {
		d.t.Fatal(err)
	}
	return res.ID
}
