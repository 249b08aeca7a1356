package pgtest

import (
	"context"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// listenersSQL finds the LISTEN connections of application $1: a
// connection that runs nothing but LISTEN and UNLISTEN (pgqueue's
// listener) shows one of them as its last statement, and no other
// statement of jobfence's contains the word.
const listenersSQL = `SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND query LIKE '%LISTEN %' ORDER BY pid`

// AppURL returns db's URL with application_name app, by which a test
// tells its connections apart in pg_stat_activity from those of the tests
// running beside it.
func AppURL(t testing.TB, db *DB, app string) string {
	t.Helper()
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String()
}

// AppPool opens a pool on AppURL(db, app), capped at maxConns and closed
// when the test ends.
func AppPool(t testing.TB, db *DB, app string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(AppURL(t, db, app))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Listeners returns the server pids of app's LISTEN connections.
func Listeners(t testing.TB, db *DB, app string) []int {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), listenersSQL, app)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return pids
}
