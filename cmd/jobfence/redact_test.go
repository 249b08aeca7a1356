package main

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
)

// TestNoPasswordPrinted runs every command, with a password in the
// connection string given both as $DATABASE_URL and as --database-url,
// against every kind of database a user may point it at, and asserts that
// the password appears nowhere in what the command prints.
func TestNoPasswordPrinted(t *testing.T) {
	const password = "Pa55-w0rd-S3CRET"
	// The test server trusts every local connection, so a password in the
	// URL is accepted and ignored, as a real server would check it.
	withPassword := func(raw, path string) string {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.UserPassword("postgres", password)
		if path != "" {
			u.Path = path
		}
		return u.String()
	}
	migrated := pgtest.New(t)
	empty := pgtest.New(t, pgtest.Options{NoMigrate: true})
	databases := []struct{ name, url string }{
		{"migrated", withPassword(migrated.URL, "")},
		{"unmigrated", withPassword(empty.URL, "")},
		{"no such database", withPassword(os.Getenv("DATABASE_URL"), "/no_such_db")},
		{"unreachable", "postgres://postgres:" + password + "@127.0.0.1:1/x?connect_timeout=5"},
		{"unreachable DSN", "host=127.0.0.1 port=1 user=postgres password=" + password + " connect_timeout=5"},
		{"quoted DSN", "host=127.0.0.1 port=1 user=postgres password='" + password + "' connect_timeout=5"},
		{"password in the query", "postgres://postgres@127.0.0.1:1/x?password=" + password},
		{"malformed", "postgres://postgres:" + password + "@127.0.0.1:notaport/x"},
	}
	forms := [][]string{
		{"jobs", "list"}, {"jobs", "list", "--state", "bogus"}, {"jobs", "show", "1"}, {"jobs", "retry", "1"},
		{"jobs", "retry", "--force", "1"}, {"jobs", "cancel", "1"}, {"jobs"},
		{"schedules", "list"}, {"schedules", "delete", "nightly"},
		{"queues", "list"}, {"queues", "list", "--json"}, {"queues", "pause", "q", "--by", "me"}, {"queues", "resume", "q"}, {"queues"},
		{"workers", "list"}, {"workers", "list", "--json"},
		{"migrate", "status"}, {"migrate", "version"}, {"migrate", "down"}, {"migrate", "up"},
		{"bench", "--mode", "burndown", "--jobs", "20", "--batch", "10", "--concurrency", "4"},
		{"ui", "--listen", "127.0.0.1:0"},
	}
	helps := [][]string{{"--help"}, {"help"}, {"nonsense"}}
	for name := range commands() {
		helps = append(helps, []string{name, "--help"}, []string{name, "-h"})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	check := func(args []string) {
		t.Helper()
		var out, errb bytes.Buffer
		cctx := ctx
		if args[0] == "ui" {
			// Against a migrated database ui serves until its context
			// ends: a second is enough to start and print what it prints.
			var stop context.CancelFunc
			cctx, stop = context.WithTimeout(ctx, time.Second)
			defer stop()
		}
		code := run(cctx, args, &out, &errb)
		if strings.Contains(out.String()+errb.String(), password) {
			t.Errorf("jobfence %q (DATABASE_URL %q) exited %d and printed the password:\nstdout:\n%s\nstderr:\n%s",
				args, os.Getenv("DATABASE_URL"), code, out.String(), errb.String())
		}
	}
	for _, db := range databases {
		t.Run(db.name, func(t *testing.T) {
			t.Setenv("DATABASE_URL", db.url)
			for _, args := range helps {
				check(args)
			}
			for _, args := range forms {
				check(args)
				check(append([]string{args[0], "--database-url", db.url}, args[1:]...))
				check(append(args, "--database-url="+db.url))
			}
		})
	}
}
