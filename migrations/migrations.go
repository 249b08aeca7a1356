package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
)

// FS holds the SQL migration files, named NNNNN_name.sql in goose's format.
//
//go:embed *.sql
var FS embed.FS

// VersionTable is the goose version table jobfence's migrations use.
const VersionTable = "jobfence_goose_db_version"

// NewProvider returns a goose provider over FS that records versions in
// VersionTable. Extra options are passed to goose.
//
// It takes no migration lock and does not retry: the migrations bound
// their blocking statements with a lock_timeout, so a pipeline that runs
// them on a live fleet should run them one at a time and run a migration
// again when it fails with SQLSTATE 55P03 (lock_not_available), as
// Migrator does.
func NewProvider(db *sql.DB, opts ...goose.ProviderOption) (*goose.Provider, error) {
	store, err := database.NewStore(database.DialectPostgres, VersionTable)
	if err != nil {
		return nil, fmt.Errorf("migrations: store: %w", err)
	}
	opts = append([]goose.ProviderOption{goose.WithStore(store), goose.WithDisableGlobalRegistry(true)}, opts...)
	p, err := goose.NewProvider("", db, FS, opts...)
	if err != nil {
		return nil, fmt.Errorf("migrations: provider: %w", err)
	}
	return p, nil
}

// open connects to databaseURL through pgx's database/sql driver and returns
// a provider without the migration lock, for reading; the caller closes
// the *sql.DB.
func open(databaseURL string) (*sql.DB, *goose.Provider, error) {
	db, err := openDB(databaseURL)
	if err != nil {
		return nil, nil, fmt.Errorf("migrations: %w", err)
	}
	p, err := NewProvider(db)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, p, nil
}

// Up applies every pending migration, as the zero Migrator does: safe
// on a live fleet, one migrator of a schema at a time.
func Up(ctx context.Context, databaseURL string) error {
	return Migrator{}.Up(ctx, databaseURL)
}

// ErrNothingToRollBack reports a Down when no migration is applied.
var ErrNothingToRollBack = errors.New("nothing to roll back: no jobfence migration is applied")

// Down rolls back the most recent migration, as the zero Migrator does.
// When none is applied it returns an error wrapping ErrNothingToRollBack.
func Down(ctx context.Context, databaseURL string) error {
	return Migrator{}.Down(ctx, databaseURL)
}

// Reset rolls back every applied migration, dropping jobfence's tables, as
// the zero Migrator does.
func Reset(ctx context.Context, databaseURL string) error {
	return Migrator{}.Reset(ctx, databaseURL)
}

// Status reports each migration and whether it is applied.
func Status(ctx context.Context, databaseURL string) ([]*goose.MigrationStatus, error) {
	db, p, err := open(databaseURL)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	st, err := p.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: status: %w", err)
	}
	return st, nil
}

// Version reports the current applied version (0 when none).
func Version(ctx context.Context, databaseURL string) (int64, error) {
	db, p, err := open(databaseURL)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	v, err := p.GetDBVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrations: version: %w", err)
	}
	return v, nil
}
