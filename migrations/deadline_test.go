package migrations_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/migrations"
)

// TestDeadlineIndexMigrationOnABigTable: on a table too big to index in
// one transaction, migration 00023 builds the deadline sweep's index of
// every state a job waits in (limited and pending included) concurrently,
// replacing an index an interrupted build left invalid, and drops the one
// of 00010; down puts 00010's back, and up again the new one.
func TestDeadlineIndexMigrationOnABigTable(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t, pgtest.Options{NoMigrate: true})
	p := providerAt(t, db.URL, 22)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO jobfence_jobs (kind) SELECT 'k' FROM generate_series(1, 12000)`); err != nil {
		t.Fatal(err)
	}
	// What an interrupted CREATE INDEX CONCURRENTLY leaves behind.
	if _, err := db.Pool.Exec(ctx, `CREATE INDEX jobfence_jobs_deadline_waiting ON jobfence_jobs (id)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'jobfence_jobs_deadline_waiting'::regclass`); err != nil {
		t.Fatal(err)
	}
	def := func(name string) string {
		var d string
		err := db.Pool.QueryRow(ctx, `SELECT coalesce((SELECT CASE WHEN i.indisvalid THEN pg_get_indexdef(i.indexrelid) ELSE 'INVALID' END
			FROM pg_index i WHERE i.indexrelid = to_regclass($1)), '')`, name).Scan(&d)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	const (
		waiting = "USING btree (deadline) WHERE ((deadline IS NOT NULL) AND (state = ANY (ARRAY['available'::text, 'scheduled'::text, 'retryable'::text, 'limited'::text, 'pending'::text])))"
		old     = "USING btree (deadline) WHERE ((deadline IS NOT NULL) AND (state = ANY (ARRAY['available'::text, 'scheduled'::text, 'retryable'::text])))"
	)
	check := func(step, present, want, absent string) {
		t.Helper()
		if d := def(present); !strings.HasSuffix(d, want) {
			t.Errorf("after %s: %s is %q, want a valid index ending %q", step, present, d, want)
		}
		if d := def(absent); d != "" {
			t.Errorf("after %s: %s is still there (%q)", step, absent, d)
		}
	}
	if err := migrations.Up(ctx, db.URL); err != nil {
		t.Fatal(err)
	}
	check("up", "jobfence_jobs_deadline_waiting", waiting, "jobfence_jobs_deadline")
	if _, err := p.DownTo(ctx, 22); err != nil {
		t.Fatal(err)
	}
	check("down", "jobfence_jobs_deadline", old, "jobfence_jobs_deadline_waiting")
	if err := migrations.Up(ctx, db.URL); err != nil {
		t.Fatal(err)
	}
	check("up again", "jobfence_jobs_deadline_waiting", waiting, "jobfence_jobs_deadline")
}
