package pgqueue

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// A workflow task's dependencies and dependents are each one bigint[]
// value: a fan-out's root lists all its dependents, a fan-in all its
// dependencies. PostgreSQL compresses such a value before storing it out
// of line (TOAST), with pglz unless told otherwise, and pglz is slow on
// long lists of IDs, where lz4 is fast (docs/benchmarks/workflows.md). A
// workflow's insert asks for lz4 for its own transaction only
// (default_toast_compression, set local): no schema changes, and every
// reader, old binaries included, reads the values as before, since the
// server decompresses them whatever compressed them.

// longListIDs is the length of a list of task IDs from which a
// workflow's insert asks for lz4: a list of that many passes the 2 kB past
// which PostgreSQL compresses a row's large values.
const longListIDs = 256

// lz4ListsSQL makes lz4 the compression of what this transaction stores
// out of line, where the server has it (PostgreSQL 14 or later, built
// with lz4); elsewhere, or where lz4 is the default already, it changes
// nothing and returns no row. It returns the setting it replaced.
const lz4ListsSQL = `
SELECT setting, set_config('default_toast_compression', 'lz4', true)
FROM pg_settings
WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals) AND setting <> 'lz4'`

// restoreCompressionSQL puts back the setting lz4ListsSQL replaced, for
// the rest of a caller's transaction (InsertWorkflowTx).
const restoreCompressionSQL = `SELECT set_config('default_toast_compression', $1, true)`

// hasLongList says whether one of the lists a workflow's insert writes
// is long: a new task's dependencies (deps) or dependents (dependents),
// by position. It writes no existing task's list: an append's edges go
// to jobfence_task_edges (addEdgesSQL).
func hasLongList(deps, dependents [][]int64) bool {
	for k := range deps {
		if len(deps[k]) >= longListIDs || len(dependents[k]) >= longListIDs {
			return true
		}
	}
	return false
}

// compressListsWithLZ4 runs lz4ListsSQL in tx and returns what puts the
// setting back (nothing to do where it changed nothing).
func compressListsWithLZ4(ctx context.Context, tx pgx.Tx) (restore func(context.Context) error, err error) {
	var old, set string
	switch err := tx.QueryRow(ctx, lz4ListsSQL).Scan(&old, &set); {
	case errors.Is(err, pgx.ErrNoRows):
		return func(context.Context) error { return nil }, nil
	case err != nil:
		return nil, fmt.Errorf("compression of long lists: %w", err)
	}
	return func(ctx context.Context) error {
		if _, err := tx.Exec(ctx, restoreCompressionSQL, old); err != nil {
			return fmt.Errorf("compression of long lists: restore %s: %w", old, err)
		}
		return nil
	}, nil
}
