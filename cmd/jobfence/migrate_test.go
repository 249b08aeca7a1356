package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/migrations"
)

func TestMigrateCommand(t *testing.T) {
	db := pgtest.New(t, pgtest.Options{NoMigrate: true})
	ctx := context.Background()
	sources, err := migrations.FS.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	// The versions are the files' numbers, which may skip one (a number
	// kept for a migration of another branch): latest and the one before.
	var latest, previous int
	for _, s := range sources {
		var v int
		if _, err := fmt.Sscanf(s.Name(), "%05d_", &v); err == nil && strings.HasSuffix(s.Name(), ".sql") && v > latest {
			latest, previous = v, latest
		}
	}
	jobfence := func(args ...string) (string, int) {
		var out, errb bytes.Buffer
		code := run(ctx, append([]string{"migrate", "--database-url", db.URL}, args...), &out, &errb)
		return out.String() + errb.String(), code
	}
	steps := []struct {
		args []string
		want string
	}{
		{[]string{"up"}, fmt.Sprintf("jobfence schema version %d", latest)},
		{[]string{"status"}, "00001_jobs.sql"},
		{[]string{"down"}, fmt.Sprintf("jobfence schema version %d", previous)},
		{[]string{"reset"}, "jobfence schema version 0"},
		{[]string{"up"}, fmt.Sprintf("jobfence schema version %d", latest)},
		{[]string{"version"}, fmt.Sprintf("jobfence schema version %d", latest)},
	}
	for _, s := range steps {
		out, code := jobfence(s.args...)
		if code != 0 || !strings.Contains(out, s.want) {
			t.Fatalf("jobfence migrate %v: exit %d, output %q; want %q", s.args, code, out, s.want)
		}
	}
	// Flags may also follow the action.
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"migrate", "version", "--database-url", db.URL}, &out, &errb); code != 0 ||
		!strings.Contains(out.String(), fmt.Sprintf("jobfence schema version %d", latest)) {
		t.Fatalf("migrate version --database-url: exit %d, %q %q", code, out.String(), errb.String())
	}
	var n int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM jobfence_jobs").Scan(&n); err != nil {
		t.Fatalf("jobs table after up/down/up: %v", err)
	}
}

func TestMigrateErrors(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"migrate", "up"}, "no database: pass --database-url or set DATABASE_URL"},
		{[]string{"migrate", "--database-url", "postgres://127.0.0.1:1/x", "sideways"}, `unknown migrate action "sideways"`},
		{[]string{"migrate", "--database-url", "postgres://postgres@127.0.0.1:1/x?connect_timeout=2", "up"}, "connect"},
		{[]string{"nonsense"}, `unknown command "nonsense"`},
	}
	for _, tt := range tests {
		var out, errb bytes.Buffer
		code := run(context.Background(), tt.args, &out, &errb)
		if code == 0 || !strings.Contains(errb.String(), tt.want) {
			t.Errorf("jobfence %v: exit %d, stderr %q; want non-zero and %q", tt.args, code, errb.String(), tt.want)
		}
	}
}

// TestMigrateLockWait: jobfence migrate up takes the migration lock as
// migrations.Migrator does, and --lock-wait bounds its wait for another
// migration of the schema, after which it names the holder.
func TestMigrateLockWait(t *testing.T) {
	db := pgtest.New(t, pgtest.Options{NoMigrate: true})
	ctx := context.Background()
	holder, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1)", migrations.LockID(db.Schema)); err != nil {
		t.Fatal(err)
	}
	defer holder.Exec(ctx, "SELECT pg_advisory_unlock_all()")
	var out, errb bytes.Buffer
	code := run(ctx, []string{"migrate", "--database-url", db.URL, "--lock-wait", "1s", "up"}, &out, &errb)
	want := fmt.Sprintf("SELECT pg_terminate_backend(%d)", holder.Conn().PgConn().PID())
	if code == 0 || !strings.Contains(errb.String(), want) {
		t.Fatalf("migrate up while another holds the lock: exit %d, stderr %q; want non-zero and %q", code, errb.String(), want)
	}
}
