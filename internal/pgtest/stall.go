package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// StallMidBatch sends stmts as the start of a batch, with no Sync after
// them, on a connection of its own (closed when the test ends), and sends
// nothing more: a client frozen, or cut off, after writing part of a
// batch. The server runs the statements and then waits for the rest,
// their transaction open and its locks held; PostgreSQL's idle bound does
// not apply to a session in that state. It returns the session's server
// process ID.
func StallMidBatch(t testing.TB, db *DB, stmts ...string) uint32 {
	t.Helper()
	ctx := context.Background()
	conn, err := pgconn.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	p := conn.StartPipeline(ctx)
	for _, sql := range stmts {
		p.SendQueryParams(sql, nil, nil, nil, nil)
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	return conn.PID()
}
