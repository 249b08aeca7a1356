package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/logbuf"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// startUI runs jobfence ui with args until the test ends and returns the
// address it serves and its stdout and stderr.
func startUI(t *testing.T, args ...string) (string, *logbuf.Buffer, *logbuf.Buffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, errOut := &logbuf.Buffer{}, &logbuf.Buffer{}
	exited := make(chan int, 1)
	go func() { exited <- run(ctx, append([]string{"ui"}, args...), out, errOut) }()
	t.Cleanup(func() {
		cancel()
		if code := <-exited; code != 0 {
			t.Errorf("jobfence ui exited %d: %s", code, errOut)
		}
	})
	serving := regexp.MustCompile(`jobfence ui: serving (http://\S+)`)
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if m := serving.FindStringSubmatch(out.String()); m != nil {
			return m[1], out, errOut
		}
		select {
		case code := <-exited:
			exited <- code
			t.Fatalf("jobfence ui exited %d before serving:\n%s%s", code, out, errOut)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("jobfence ui did not say where it serves:\n%s%s", out, errOut)
	return "", nil, nil
}

// TestUICommand: jobfence ui serves the pages behind basic auth, refuses
// a wrong password, and never prints the password.
func TestUICommand(t *testing.T) {
	db := pgtest.New(t)
	const password = "s3cret-Pa55"
	id, err := pgqueue.New(db.Pool, pgqueue.Config{}).Enqueue(context.Background(), queue.EnqueueParams{Kind: "mail", Args: []byte(`{"to":"<script>x</script>"}`)})
	if err != nil {
		t.Fatal(err)
	}
	base, out, errOut := startUI(t, "--database-url", db.URL, "--listen", "127.0.0.1:0", "--basic-auth", "admin:"+password, "--base-path", "/ops")
	if !strings.HasSuffix(base, "/ops/") {
		t.Fatalf("serving %s, want it under /ops/", base)
	}
	get := func(path, user, pass string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+strings.TrimPrefix(path, "/"), nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, creds := range [][2]string{{"", ""}, {"admin", "wrong"}, {"root", password}, {"admin", password + "x"}} {
		if code, _ := get("/", creds[0], creds[1]); code != http.StatusUnauthorized {
			t.Errorf("GET / as %q:%q = %d, want 401", creds[0], creds[1], code)
		}
	}
	for _, path := range []string{"/", "/jobs", fmt.Sprintf("/jobs/%d", id.ID), "/queues", "/schedules", "/workers", "/keys", "/metrics"} {
		code, body := get(path, "admin", password)
		if code != http.StatusOK {
			t.Errorf("GET %s = %d:\n%s", path, code, body)
		}
		if strings.Contains(body, "<script>x") || strings.Contains(body, password) {
			t.Errorf("GET %s shows unescaped args or the password", path)
		}
	}
	if code, body := get("/metrics", "admin", password); code != http.StatusOK || !strings.Contains(body, `jobfence_queue_jobs{queue="default",state="available"} 1`) {
		t.Errorf("/metrics = %d:\n%s", code, body)
	}
	if strings.Contains(out.String()+errOut.String(), password) {
		t.Errorf("jobfence ui printed the password:\n%s%s", out, errOut)
	}
	if strings.Contains(errOut.String(), "warning") {
		t.Errorf("a loopback UI with basic auth warned:\n%s", errOut)
	}
}

// TestUIWarnsBeyondLoopback: serving on every interface without basic auth
// says what that exposes; read-only says less.
func TestUIWarnsBeyondLoopback(t *testing.T) {
	db := pgtest.New(t)
	_, _, errOut := startUI(t, "--database-url", db.URL, "--listen", "0.0.0.0:0")
	if !regexp.MustCompile(`warning: serving on \[?[0-9a-f.:]+\]?:\d+, beyond loopback, without --basic-auth: anyone who can reach it sees every job's arguments and errors and can retry, cancel and delete jobs and pause queues`).MatchString(errOut.String()) {
		t.Errorf("no warning:\n%s", errOut)
	}
	_, out, _ := startUI(t, "--database-url", db.URL, "--read-only", "--listen", "127.0.0.1:0")
	if !regexp.MustCompile(`jobfence ui: serving http://127\.0\.0\.1:\d+/ \(read-only\)`).MatchString(out.String()) {
		t.Errorf("read-only:\n%s", out)
	}
	// Port 8080 may be taken by anything on a shared machine: the default
	// is read from the usage rather than served.
	_, usage, _ := cli(t, "ui", "-h")
	if !strings.Contains(usage, `address to serve the dashboard on (loopback by default) (default "127.0.0.1:8080")`) {
		t.Errorf("usage:\n%s", usage)
	}
}

// TestUIBadFlags: bad input is refused before anything is served, and a
// malformed --basic-auth is not echoed (it may be a password).
func TestUIBadFlags(t *testing.T) {
	db := pgtest.New(t)
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--basic-auth", "justapassword"}, "jobfence ui: --basic-auth wants USER:PASSWORD, both non-empty\n"},
		{[]string{"--basic-auth", "admin:"}, "jobfence ui: --basic-auth wants USER:PASSWORD, both non-empty\n"},
		{[]string{"--listen", "127.0.0.1:notaport"}, "jobfence ui: listen on 127.0.0.1:notaport: listen tcp: lookup tcp/notaport: unknown port\n"},
		{[]string{"extra"}, `jobfence ui: unexpected arguments: ["extra"]`},
	} {
		_, errs, code := cli(t, append([]string{"ui", "--database-url", db.URL}, tt.args...)...)
		if code != 1 || !strings.HasSuffix(errs, tt.want) && !strings.Contains(errs, tt.want) {
			t.Errorf("jobfence ui %q: exit %d, stderr %q; want 1 and %q", tt.args, code, errs, tt.want)
		}
		if strings.Contains(errs, "justapassword") {
			t.Errorf("jobfence ui echoed a malformed --basic-auth: %q", errs)
		}
	}
}
