package migrations_test

import (
	"context"
	"database/sql"
	"testing"

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
