package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/jobfence/jobfence/dashboard"
	"github.com/jobfence/jobfence/queue"
)

// basicAuthEnv may hold --basic-auth's USER:PASSWORD, so that the password
// is not in the process's command line for every local user to read.
const basicAuthEnv = "JOBFENCE_UI_BASIC_AUTH"

func runUI(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ui", flag.ContinueOnError)
	fs.SetOutput(stderr)
	databaseURL := databaseURLFlag(fs)
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve the dashboard on (loopback by default)")
	readOnly := fs.Bool("read-only", false, "refuse every action (retry, cancel, delete, pause, resume)")
	basicAuth := fs.String("basic-auth", "", "USER:PASSWORD that every request must present (default $"+basicAuthEnv+")")
	basePath := fs.String("base-path", "", "serve under this path, e.g. /jobfence, behind a reverse proxy")
	showEncrypted := fs.Bool("show-encrypted", false, "show encrypted args in clear to every viewer, opened with the keys of $"+keysEnv+" (default: shown as \"encrypted (key ID)\")")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: jobfence ui [--listen ADDR] [--read-only] [--basic-auth USER:PASS] [--base-path P] [--show-encrypted] [--database-url URL]")
		fs.PrintDefaults()
	}
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected arguments: %q", rest)
	}
	auth := *basicAuth
	if auth == "" {
		auth = os.Getenv(basicAuthEnv)
	}
	var user, pass string
	if auth != "" {
		var ok bool
		user, pass, ok = strings.Cut(auth, ":")
		if !ok || user == "" || pass == "" {
			// The value is not repeated: it may be a password typed in the wrong place.
			return errors.New("--basic-auth wants USER:PASSWORD, both non-empty")
		}
	}
	var ring *queue.KeyRing
	if *showEncrypted {
		if ring, err = keyRingFromEnv(); err != nil {
			return err
		}
		if ring == nil {
			return fmt.Errorf("--show-encrypted needs the keys in %s", keysEnv)
		}
	}
	_, pool, err := openClient(ctx, databaseURL())
	if err != nil {
		return err
	}
	defer pool.Close()

	logger := slog.New(slog.NewTextHandler(stderr, nil))
	var h http.Handler = dashboard.New(pool, dashboard.Options{BasePath: *basePath, ReadOnly: *readOnly, Logger: logger, Encryption: ring})
	if user != "" {
		h = requireBasicAuth(h, user, pass)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *listen, err)
	}
	if user == "" && !loopback(ln.Addr()) {
		can := " and can retry, cancel and delete jobs and pause queues"
		if *readOnly {
			can = ""
		}
		fmt.Fprintf(stderr, "warning: serving on %s, beyond loopback, without --basic-auth: anyone who can reach it sees every job's arguments and errors%s\n", ln.Addr(), can)
	}
	mode := ""
	if *readOnly {
		mode = " (read-only)"
	}
	base := "/" + strings.Trim(*basePath, "/")
	if base != "/" {
		base += "/"
	}
	fmt.Fprintf(stdout, "jobfence ui: serving http://%s%s%s\n", ln.Addr(), base, mode)
	mux := http.NewServeMux()
	mux.Handle("/", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "jobfence ui: stopped")
	return nil
}

// requireBasicAuth lets through the requests that present user and pass.
// Both are compared as SHA-256 digests in constant time, so neither the
// time taken nor an early exit tells how much of a guess was right, or how
// long the password is.
func requireBasicAuth(h http.Handler, user, pass string) http.Handler {
	wantUser, wantPass := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(pass))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, _ := r.BasicAuth()
		gotUser, gotPass := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
		userOK := subtle.ConstantTimeCompare(gotUser[:], wantUser[:])
		passOK := subtle.ConstantTimeCompare(gotPass[:], wantPass[:])
		if userOK&passOK != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="jobfence", charset="UTF-8"`)
			http.Error(w, "jobfence ui: a user name and password are required", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// loopback reports whether addr accepts connections from this host only.
func loopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
