package migrations_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestUpDownUp(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t, pgtest.Options{NoMigrate: true})
	steps := []struct {
		name string
		run  func(context.Context, string) error
		want bool // whether jobfence_jobs exists afterwards
	}{
		{"up", migrations.Up, true},
		{"reset", migrations.Reset, false},
		{"up again", migrations.Up, true},
	}
	for _, s := range steps {
		if err := s.run(ctx, db.URL); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		var exists bool
		if err := db.Pool.QueryRow(ctx, "SELECT to_regclass('jobfence_jobs') IS NOT NULL").Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if exists != s.want {
			t.Fatalf("after %s: jobfence_jobs exists=%v, want %v", s.name, exists, s.want)
		}
	}
	v, err := migrations.Version(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	sources, _ := migrations.FS.ReadDir(".")
	var n int64
	for _, s := range sources {
		if len(s.Name()) > 4 && s.Name()[len(s.Name())-4:] == ".sql" {
			n++
		}
	}
	if v == 0 || n == 0 {
		t.Fatalf("version %d after up with %d migration files", v, n)
	}
	st, err := migrations.Status(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.State != goose.StateApplied {
			t.Errorf("migration %d is %s, want applied", s.Source.Version, s.State)
		}
	}
}

// TestOwnVersionTable shows that a service's own goose table and ours live
// side by side: running the service's goose with the default table does not
// see our versions, and ours does not see the service's.
func TestOwnVersionTable(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t, pgtest.Options{NoMigrate: true})
	if err := migrations.Up(ctx, db.URL); err != nil {
		t.Fatal(err)
	}
	sqlDB, err := sql.Open("pgx", db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer sqlDB.Close()
	store, err := database.NewStore(database.DialectPostgres, "goose_db_version")
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider("", sqlDB, nil, goose.WithStore(store), goose.WithDisableGlobalRegistry(true),
		goose.WithGoMigrations(goose.NewGoMigration(1, &goose.GoFunc{RunDB: func(ctx context.Context, db *sql.DB) error {
			_, err := db.ExecContext(ctx, "CREATE TABLE service_table (id int)")
			return err
		}}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatalf("service's own goose up: %v", err)
	}
	if v, _ := p.GetDBVersion(ctx); v != 1 {
		t.Fatalf("service goose version = %d, want 1", v)
	}
	ours, err := migrations.Version(ctx, db.URL)
	if err != nil || ours == 0 {
		t.Fatalf("our version = %d, %v", ours, err)
	}
}

// TestClaimIndexMigrationOnABigTable: on a table too big to index in one
// transaction, migration 00006 builds its indexes concurrently, replaces
// an index an interrupted build left invalid, and rolls back the same way.
func TestClaimIndexMigrationOnABigTable(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t, pgtest.Options{NoMigrate: true})
	p := providerAt(t, db.URL, 4)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO jobfence_jobs (kind, state, scheduled_at)
		SELECT 'k', (ARRAY['available', 'scheduled', 'retryable', 'completed'])[1 + i % 4], now() + (i % 3 - 1) * interval '1 hour'
		FROM generate_series(1, 12000) AS i`); err != nil {
		t.Fatal(err)
	}
	// What an interrupted CREATE INDEX CONCURRENTLY leaves behind.
	if _, err := db.Pool.Exec(ctx, `CREATE INDEX jobfence_jobs_waiting ON jobfence_jobs (id)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'jobfence_jobs_waiting'::regclass`); err != nil {
		t.Fatal(err)
	}
	indexes := func() map[string]string {
		rows, err := db.Pool.Query(ctx, `SELECT c.relname, CASE WHEN i.indisvalid THEN pg_get_indexdef(i.indexrelid) ELSE 'INVALID' END
			FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'jobfence_jobs'::regclass`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		m := map[string]string{}
		for rows.Next() {
			var name, def string
			if err := rows.Scan(&name, &def); err != nil {
				t.Fatal(err)
			}
			m[name] = def
		}
		return m
	}
	want := func(step string, present map[string]string, absent ...string) {
		t.Helper()
		got := indexes()
		for name, def := range present {
			if !strings.Contains(got[name], def) {
				t.Errorf("after %s: index %s is %q, want a valid index containing %q", step, name, got[name], def)
			}
		}
		for _, name := range absent {
			if _, ok := got[name]; ok {
				t.Errorf("after %s: index %s is still there", step, name)
			}
		}
	}
	newIndexes := map[string]string{
		"jobfence_jobs_available": "(queue, priority, scheduled_at, id) WHERE (state = 'available'::text)",
		"jobfence_jobs_waiting":   "(scheduled_at) WHERE (state = ANY (ARRAY['scheduled'::text, 'retryable'::text]))",
		"jobfence_jobs_running":   "(attempted_at) WHERE ((state = 'running'::text) AND (attempted_at IS NOT NULL))",
	}
	oldIndexes := map[string]string{
		"jobfence_jobs_claim": "(queue, priority, scheduled_at, id) WHERE (state = ANY (ARRAY['available'::text, 'scheduled'::text, 'retryable'::text]))",
		"jobfence_jobs_lease": "(lease_expires_at) WHERE (lease_expires_at IS NOT NULL)",
	}
	fillfactor := func() string {
		var opts []string
		if err := db.Pool.QueryRow(ctx, `SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = 'jobfence_jobs'::regclass`).Scan(&opts); err != nil {
			t.Fatal(err)
		}
		return strings.Join(opts, ",")
	}
	if err := migrations.Up(ctx, db.URL); err != nil {
		t.Fatal(err)
	}
	want("up", newIndexes, "jobfence_jobs_claim", "jobfence_jobs_lease")
	if got := fillfactor(); got != "fillfactor=70" {
		t.Errorf("after up: the table's options are %q, want fillfactor=70", got)
	}
	if _, err := p.DownTo(ctx, 5); err != nil {
		t.Fatal(err)
	}
	want("down", oldIndexes, "jobfence_jobs_available", "jobfence_jobs_waiting", "jobfence_jobs_running")
	if got := fillfactor(); got != "" {
		t.Errorf("after down: the table's options are %q, want none", got)
	}
	if err := migrations.Up(ctx, db.URL); err != nil {
		t.Fatal(err)
	}
	want("up again", newIndexes, "jobfence_jobs_claim", "jobfence_jobs_lease")
}

// providerAt migrates the schema of dbURL up to version v and returns the
// provider, for a test that moves between versions.
func providerAt(t *testing.T, dbURL string, v int64) *goose.Provider {
	t.Helper()
	sqlDB, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sqlDB.Close() })
	p, err := migrations.NewProvider(sqlDB)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(context.Background(), v); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTraceContextDownLosesNoLink: going down from version 9 puts each
// job's packed traceparent back into its metadata as the text it was, the
// job's other metadata kept.
func TestTraceContextDownLosesNoLink(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t, pgtest.Options{NoMigrate: true})
	p := providerAt(t, db.URL, 9)
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	if _, err := db.Pool.Exec(ctx, `INSERT INTO jobfence_jobs (kind, metadata, trace_context) VALUES
		('traced', '{"tenant": "t1"}', decode('000af7651916cd43dd8448eb211c80319cb7ad6b716920333101', 'hex')),
		('plain', '{"tenant": "t2"}', NULL)`); err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 8); err != nil {
		t.Fatal(err)
	}
	rows, err := db.Pool.Query(ctx, `SELECT kind, metadata::text FROM jobfence_jobs ORDER BY kind`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rows.Next() {
		var kind, md string
		if err := rows.Scan(&kind, &md); err != nil {
			t.Fatal(err)
		}
		got[kind] = md
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"plain":  `{"tenant": "t2"}`,
		"traced": `{"tenant": "t1", "traceparent": "` + tp + `"}`,
	}
	if got["plain"] != want["plain"] || got["traced"] != want["traced"] {
		t.Fatalf("metadata after going down to 8:\n%v\nwant\n%v", got, want)
	}
}

// TestUniqueHashMigrationOnABigTable: on a table too big to index in one
// transaction, migration 00012 builds the computed keys' unique index
// concurrently, replacing an index an interrupted build left invalid; the
// index refuses a duplicate only in the states its row names; down drops
// the columns, the index and the function, and up builds them again.
func TestUniqueHashMigrationOnABigTable(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t, pgtest.Options{NoMigrate: true})
	p := providerAt(t, db.URL, 11)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO jobfence_jobs (kind) SELECT 'k' FROM generate_series(1, 12000)`); err != nil {
		t.Fatal(err)
	}
	// What an interrupted CREATE INDEX CONCURRENTLY leaves behind.
	if _, err := db.Pool.Exec(ctx, `CREATE INDEX jobfence_jobs_unique_hash ON jobfence_jobs (id)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'jobfence_jobs_unique_hash'::regclass`); err != nil {
		t.Fatal(err)
	}
	def := func() string {
		var d string
		err := db.Pool.QueryRow(ctx, `SELECT coalesce((SELECT CASE WHEN i.indisvalid THEN pg_get_indexdef(i.indexrelid) ELSE 'INVALID' END
			FROM pg_index i WHERE i.indexrelid = to_regclass('jobfence_jobs_unique_hash')), '')`).Scan(&d)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	const want = "UNIQUE INDEX jobfence_jobs_unique_hash ON " // then the schema's name
	const wantTail = "USING btree (unique_hash) WHERE ((unique_hash IS NOT NULL) AND jobfence_state_in_bitmask(unique_states, state))"
	check := func(step string) {
		t.Helper()
		if d := def(); !strings.Contains(d, want) || !strings.HasSuffix(d, wantTail) {
			t.Fatalf("after %s: the index is %q, want %q...%q", step, d, want, wantTail)
		}
		// Two jobs of one key: refused while both are in their states
		// (the unfinished ones, 15), let through once one is completed.
		ins := `INSERT INTO jobfence_jobs (kind, state, unique_hash, unique_states) VALUES ('u', $1, '\x01', 15)`
		if _, err := db.Pool.Exec(ctx, ins, "available"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Pool.Exec(ctx, ins, "running"); err == nil || !strings.Contains(err.Error(), "jobfence_jobs_unique_hash") {
			t.Fatalf("after %s: a duplicate of an available job: %v, want the index to refuse it", step, err)
		}
		if _, err := db.Pool.Exec(ctx, ins, "completed"); err != nil {
			t.Fatalf("after %s: a completed duplicate: %v, want it stored", step, err)
		}
		if _, err := db.Pool.Exec(ctx, `DELETE FROM jobfence_jobs WHERE kind = 'u'`); err != nil {
			t.Fatal(err)
		}
	}
	if err := migrations.Up(ctx, db.URL); err != nil {
		t.Fatal(err)
	}
	check("up")
	if _, err := p.DownTo(ctx, 11); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_attribute WHERE attrelid = 'jobfence_jobs'::regclass
			AND attname IN ('unique_hash', 'unique_states') AND NOT attisdropped)
		+ (to_regclass('jobfence_jobs_unique_hash') IS NOT NULL)::int
		+ (to_regprocedure('jobfence_state_in_bitmask(smallint, text)') IS NOT NULL)::int`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("after down: %d of the columns, the index and the function are left, want none", left)
	}
	if err := migrations.Up(ctx, db.URL); err != nil {
		t.Fatal(err)
	}
	check("up again")
}

// TestReleasesDownRefusedWhileARangeWaits: going down past version 21 is
// refused while a completed task's dependents wait in jobfence_releases
// (the workers before it would never release them), with a message that
// says what to do, and the table is kept; once it is empty, down goes.
func TestReleasesDownRefusedWhileARangeWaits(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO jobfence_releases (task_id, first, last) VALUES (1, 1001, 2000)`); err != nil {
		t.Fatal(err)
	}
	p := providerAt(t, db.URL, 21)
	_, err := p.DownTo(ctx, 20)
	if want := "workflow dependents are still waiting to be released (jobfence_releases is not empty): run this release's workers until it is, then migrate down"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("down past 21 with a range waiting = %v, want an error containing %q", err, want)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_releases`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("after the refused down: %d ranges, %v; want the one kept", n, err)
	}
	if _, err := db.Pool.Exec(ctx, `DELETE FROM jobfence_releases`); err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 20); err != nil {
		t.Fatalf("down past 21 with no range waiting: %v", err)
	}
	var exists bool
	if err := db.Pool.QueryRow(ctx, `SELECT to_regclass('jobfence_releases') IS NOT NULL`).Scan(&exists); err != nil || exists {
		t.Fatalf("jobfence_releases exists = %v, %v after down; want dropped", exists, err)
	}
}

// frozenReaderHoldsDown starts a session that reads table inside a
// transaction and stays there (a client that stopped), and checks that
// going down past version from beside it fails with lock_not_available
// (55P03) about its 1 s lock_timeout later. It returns the provider and
// the holder's transaction, for the caller to see what the refused down
// kept and then to end the holder.
func frozenReaderHoldsDown(t *testing.T, db *pgtest.DB, table string, from int64) (*goose.Provider, pgx.Tx) {
	t.Helper()
	ctx := context.Background()
	holder, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Rollback(context.Background()) })
	if _, err := holder.Exec(ctx, `SELECT count(*) FROM `+table); err != nil {
		t.Fatal(err)
	}
	p := providerAt(t, db.URL, from)
	start := time.Now()
	_, err = p.DownTo(ctx, from-1)
	took := time.Since(start)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("down past %d beside a frozen reader of %s = %v, want lock_not_available (55P03)", from, table, err)
	}
	if took > 10*time.Second {
		t.Errorf("down gave up after %v, want about its 1 s lock_timeout", took)
	}
	return p, holder
}

// TestReleasesDownGivesUpOnAFrozenHolder: a session frozen inside a
// transaction that read jobfence_releases (a range's release whose client
// stopped) holds down past version 21 1 s at most, its lock_timeout: the
// down fails with lock_not_available, the table stays, and once the
// holder is gone the down goes.
func TestReleasesDownGivesUpOnAFrozenHolder(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	p, holder := frozenReaderHoldsDown(t, db, "jobfence_releases", 21)
	var exists bool
	if err := db.Pool.QueryRow(ctx, `SELECT to_regclass('jobfence_releases') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		t.Fatalf("jobfence_releases exists = %v, %v after the refused down; want kept", exists, err)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 20); err != nil {
		t.Fatalf("down past 21 once the holder is gone: %v", err)
	}
}
