package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBenchBadFlags: flag combinations the bench cannot run say why.
func TestBenchBadFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--pgbouncer"}, "--pgbouncer needs --instances N"},
		{[]string{"bench", "--pgbouncer", "--instances", "2", "--database-url", "postgres://u:hunter2@127.0.0.1:1/db"},
			"--pgbouncer runs PgBouncer in front of the bench's own throwaway PostgreSQL"},
		{[]string{"bench", "--instances", "-1"}, "want instances ≥ 0"},
		{[]string{"bench", "--instances", "2", "--hold-horizon"}, "--hold-horizon runs one worker in this process"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), tt.args, &out, &errb)
		if code == 0 || !strings.Contains(errb.String(), tt.want) {
			t.Errorf("%q: exit %d, stderr %q; want an error containing %q", tt.args, code, errb.String(), tt.want)
		}
		if strings.Contains(out.String()+errb.String(), "hunter2") {
			t.Errorf("%q printed the password", tt.args)
		}
	}
}

// TestBenchFleetThroughPgBouncer: two worker processes through PgBouncer
// complete jobs, on at most the pool's server connections, without stale
// outcomes or errors.
func TestBenchFleetThroughPgBouncer(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, []string{"bench", "--mode", "continuous", "--duration", "4s", "--instances", "2", "--pgbouncer",
		"--pool-size", "3", "--concurrency", "50", "--backlog", "2000", "--batch", "500"}, &out, &errb)
	t.Logf("stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	m := regexp.MustCompile(`2 instances via PgBouncer \(transaction mode, pool size 3\): (\d+) jobs .* = (\d+) jobs/s; server connections max (\d+); .*stale 0, errors 0`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatal("no fleet line with stale 0, errors 0")
	}
	if m[1] == "0" {
		t.Fatal("no job completed")
	}
	if conns, _ := strconv.Atoi(m[3]); conns > 3 {
		t.Fatalf("%d server connections, more than the pool size 3", conns)
	}
}
