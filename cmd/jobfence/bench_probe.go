package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/migrations"
)

// probe reads, on a connection of its own, what a run costs the server:
// its counters, the jobs' enqueue-to-start times, and whether the run's
// connections are gone.
type probe struct {
	conn     *pgx.Conn
	settings serverSettings
	// name is the run's schema, and the application_name (or, in a fleet
	// run, the role) of every connection the run opens.
	name string
}

func newProbe(ctx context.Context, baseURL, name string, settings serverSettings) (*probe, error) {
	conn, err := pgx.Connect(ctx, baseURL)
	if err != nil {
		return nil, err
	}
	return &probe{conn: conn, settings: settings, name: name}, nil
}

func (p *probe) close() { p.conn.Close(context.Background()) }

func (p *probe) counters(ctx context.Context) (dbCounters, error) {
	return readCounters(ctx, p.conn, p.settings.statements)
}

// now is the server's clock, which stamps the jobs' times.
func (p *probe) now(ctx context.Context) (time.Time, error) {
	var t time.Time
	err := p.conn.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&t)
	return t, err
}

const backendsSQL = `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 OR usename = $1`

// waitGone waits, for 10 s at most, until the run's connections have
// ended: a backend flushes its last statistics as it exits.
func (p *probe) waitGone(ctx context.Context) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := p.conn.QueryRow(ctx, backendsSQL, p.name).Scan(&n); err != nil {
			return fmt.Errorf("bench: wait for the run's connections to end: %w", err)
		}
		if n == 0 || time.Now().After(deadline) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startLatencySQL is the enqueue-to-start time of the jobs of a table
// claimed since $1, by the database's clock: the claim's time (attempted_at)
// less the insert's (created_at).
const startLatencySQL = `
SELECT count(*), coalesce(percentile_disc(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY extract(epoch FROM attempted_at - created_at)), ARRAY[0, 0]::float8[])
FROM %s WHERE attempted_at >= $1`

// startLatency reads the p50 and p99 enqueue-to-start times of the jobs in
// schema's table claimed since the server's time since.
func (p *probe) startLatency(ctx context.Context, schema string, since time.Time) (p50, p99 time.Duration, err error) {
	var n int64
	var q []float64
	sql := fmt.Sprintf(startLatencySQL, pgx.Identifier{schema, "jobfence_jobs"}.Sanitize())
	if err := p.conn.QueryRow(ctx, sql, since).Scan(&n, &q); err != nil {
		return 0, 0, fmt.Errorf("bench: enqueue-to-start times: %w", err)
	}
	if n == 0 || len(q) != 2 {
		return 0, 0, nil
	}
	sec := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	return sec(q[0]), sec(q[1]), nil
}

// withApplicationName sets application_name on a connection URL, so that
// the probe can find the run's connections.
func withApplicationName(dbURL, name string) (string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", fmt.Errorf("bench: parse the connection URL: %w", err)
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// runSchema creates the schema name through conn, migrates it and sets
// the jobs table's storage options when asked (--fillfactor,
// --table-options). It returns a URL whose search_path is the schema, and
// a function that drops it.
func runSchema(ctx context.Context, conn *pgx.Conn, baseURL, name string, options []string) (string, func(), error) {
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, err
	}
	drop := func() { conn.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{name}.Sanitize()+" CASCADE") }
	url := pgtest.WithSearchPath(baseURL, name)
	if err := migrations.Up(ctx, url); err != nil {
		drop()
		return "", nil, err
	}
	if err := setTableOptions(ctx, conn, name, options); err != nil {
		drop()
		return "", nil, err
	}
	return url, drop, nil
}

// setTableOptions sets storage options ("name=value", checked by
// parseTableOptions) on schema's jobs table; none leaves it.
func setTableOptions(ctx context.Context, conn *pgx.Conn, schema string, options []string) error {
	if len(options) == 0 {
		return nil
	}
	sql := fmt.Sprintf("ALTER TABLE %s SET (%s)", pgx.Identifier{schema, "jobfence_jobs"}.Sanitize(), strings.Join(options, ", "))
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("bench: %s: %w", sql, err)
	}
	return nil
}
