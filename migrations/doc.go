// Package migrations holds jobfence's schema as goose SQL migrations embedded
// in the binary.
//
// The migrations record their versions in a goose table of their own,
// VersionTable, so a service that runs goose for its own schema never
// collides with jobfence. FS is exported for services that run migrations in
// their own pipeline; Up, Down, Reset, Status and Version serve everyone else.
//
// Tables are created unqualified, in the first schema of the connection's
// search_path; add search_path=myschema to the URL to put them elsewhere.
//
// # Migrating a live fleet
//
// Up, Down and Reset (a Migrator) run while the fleet enqueues, claims,
// heartbeats and completes, and every migration, up and down, follows
// rules that keep the fleet from waiting on it for more than a second
// (TestMigrationFilesAreLiveSafe checks the first two):
//
//   - Every statement that takes a lock which stops reads or writes
//     (ALTER TABLE, DROP, a plain CREATE INDEX, LOCK) runs under
//     lock_timeout = '1s': SET LOCAL lock_timeout in a migration that runs
//     in a transaction, and inside a DO block, whose transaction it ends
//     with, in one that does not (NO TRANSACTION). A statement waiting for
//     a lock makes every later one on the table wait behind it; after 1 s
//     it gives up (SQLSTATE 55P03) and Migrator runs the migration again,
//     after a backoff.
//   - An index on a table that already exists is built with CREATE INDEX
//     CONCURRENTLY IF NOT EXISTS in a NO TRANSACTION migration, after a DO
//     block that drops the index if an interrupted build left it invalid
//     and, on a small table (a new installation, a test's schema), builds
//     it at once, giving way to the concurrent build when the table is
//     busy; indexes are dropped CONCURRENTLY.
//   - Data is rewritten in batches, each its own short transaction (a DO
//     block that COMMITs), never in one statement over the whole table.
//   - A NO TRANSACTION migration may stop after any statement (a lock
//     timeout, a killed process), so each of its statements may run again:
//     IF [NOT] EXISTS, and batches that leave nothing to redo behind them.
//
// See docs/operations.md.
package migrations
