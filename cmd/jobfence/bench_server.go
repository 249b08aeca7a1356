package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// serverSettings are the settings of the server a bench ran on that decide
// what a commit costs, printed with every bench so that no figure is read
// without them.
type serverSettings struct {
	version, fsync, syncCommit, fullPageWrites, sharedBuffers, maxWALSize string
	// statements says whether pg_stat_statements can be read in the
	// bench's database.
	statements bool
}

const settingsSQL = `SELECT current_setting('server_version'), current_setting('fsync'), current_setting('synchronous_commit'),
    current_setting('full_page_writes'), current_setting('shared_buffers'), current_setting('max_wal_size')`

// readSettings reads the server's settings through conn, and whether
// pg_stat_statements answers there.
func readSettings(ctx context.Context, conn *pgx.Conn) (serverSettings, error) {
	var s serverSettings
	if err := conn.QueryRow(ctx, settingsSQL).Scan(&s.version, &s.fsync, &s.syncCommit, &s.fullPageWrites,
		&s.sharedBuffers, &s.maxWALSize); err != nil {
		return s, fmt.Errorf("bench: read the server's settings: %w", err)
	}
	_, err := readStatements(ctx, conn)
	s.statements = err == nil
	return s, nil
}

// durable reports whether a commit survives a crash of the machine.
func (s serverSettings) durable() bool {
	return s.fsync == "on" && s.syncCommit != "off" && s.fullPageWrites == "on"
}

func (s serverSettings) String() string {
	label := "durable"
	if !s.durable() {
		label = "NOT DURABLE: a crash of the machine can lose or corrupt commits; figures not comparable with a production server"
	}
	st := "pg_stat_statements available"
	if !s.statements {
		st = "pg_stat_statements unavailable (statements/s counts transactions instead)"
	}
	return fmt.Sprintf("PostgreSQL %s: fsync=%s synchronous_commit=%s full_page_writes=%s shared_buffers=%s max_wal_size=%s (%s); %s",
		s.version, s.fsync, s.syncCommit, s.fullPageWrites, s.sharedBuffers, s.maxWALSize, label, st)
}

// dbCounters is a reading of the server counters a bench turns into a
// job's cost: the bench database's commits, the server's WAL position, and
// pg_stat_statements' calls per statement when it is available.
type dbCounters struct {
	at      time.Time
	commits int64
	wal     uint64
	stmts   map[int64]stmtCount
}

// stmtCount is a statement's counters in pg_stat_statements, or what they
// grew by between two readings (minus).
type stmtCount struct {
	calls int64
	total float64 // milliseconds
	// rows are the rows the calls returned or changed; buffers the
	// shared buffers they hit or read; wal their WAL records.
	rows, buffers, wal int64
	query              string
}

// minus is what s's counters grew by since was.
func (s stmtCount) minus(was stmtCount) stmtCount {
	return stmtCount{calls: s.calls - was.calls, total: s.total - was.total, rows: s.rows - was.rows,
		buffers: s.buffers - was.buffers, wal: s.wal - was.wal, query: s.query}
}

// pg_stat_database's counters are flushed by each backend at most once a
// second while it is busy, so a reading lags by up to about a second of
// commits; the bench reads them after its connections have closed (burn-down)
// or over a window long enough for the lag to wash out (continuous).
const countersSQL = `SELECT xact_commit, pg_current_wal_lsn()::text FROM pg_stat_database WHERE datname = current_database()`

func readCounters(ctx context.Context, conn *pgx.Conn, statements bool) (dbCounters, error) {
	c := dbCounters{at: time.Now()}
	var lsn string
	if err := conn.QueryRow(ctx, countersSQL).Scan(&c.commits, &lsn); err != nil {
		return c, fmt.Errorf("bench: read the server's counters: %w", err)
	}
	var err error
	if c.wal, err = parseLSN(lsn); err != nil {
		return c, err
	}
	if statements {
		if c.stmts, err = readStatements(ctx, conn); err != nil {
			return c, err
		}
	}
	return c, nil
}

// parseLSN reads a WAL position such as 0/16B3740.
func parseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bench: WAL position %q not understood", s)
	}
	return h<<32 | l, nil
}

// statementsSQL reads this database's statements. It fails when the
// extension is not installed here or not preloaded.
const statementsSQL = `SELECT queryid, calls, total_exec_time, rows, shared_blks_hit + shared_blks_read, wal_records,
    left(regexp_replace(query, '\s+', ' ', 'g'), 100)
FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND queryid IS NOT NULL`

func readStatements(ctx context.Context, conn *pgx.Conn) (map[int64]stmtCount, error) {
	rows, err := conn.Query(ctx, statementsSQL)
	if err != nil {
		return nil, err
	}
	m := map[int64]stmtCount{}
	for rows.Next() {
		var id int64
		var s stmtCount
		if err := rows.Scan(&id, &s.calls, &s.total, &s.rows, &s.buffers, &s.wal, &s.query); err != nil {
			rows.Close()
			return nil, err
		}
		m[id] = s
	}
	return m, rows.Err()
}

// cost is what the jobs of a window cost the database.
type cost struct {
	jobs     int64
	window   time.Duration
	commits  int64
	walBytes uint64
	// calls is the statements run (-1 without pg_stat_statements).
	calls int64
	top   []stmtCount
}

// costBetween is the cost of jobs completed between two readings.
func costBetween(a, b dbCounters, jobs int64) cost {
	c := cost{jobs: jobs, window: b.at.Sub(a.at), commits: b.commits - a.commits, calls: -1}
	if b.wal > a.wal {
		c.walBytes = b.wal - a.wal
	}
	if a.stmts != nil && b.stmts != nil {
		c.calls = 0
		for id, s := range b.stmts {
			d := s.minus(a.stmts[id])
			if d.calls <= 0 || strings.Contains(s.query, "pg_stat_statements") {
				continue
			}
			c.calls += d.calls
			c.top = append(c.top, d)
		}
		sort.Slice(c.top, func(i, j int) bool { return c.top[i].total > c.top[j].total })
	}
	return c
}

func (c cost) String() string {
	if c.jobs <= 0 {
		return "cost: no job completed"
	}
	n := float64(c.jobs)
	s := fmt.Sprintf("%.4f commits/job, %.0f WAL bytes/job", float64(c.commits)/n, float64(c.walBytes)/n)
	secs := c.window.Seconds()
	if c.calls >= 0 {
		s += fmt.Sprintf(", %.0f statements/s (%.3f/job, pg_stat_statements)", float64(c.calls)/secs, float64(c.calls)/n)
	} else {
		s += fmt.Sprintf(", statements/s unavailable (no pg_stat_statements); %.0f commits/s", float64(c.commits)/secs)
	}
	return s
}

// topStatements lists the k statements that took the most server time.
func (c cost) topStatements(k int) string {
	var b strings.Builder
	for i, d := range c.top {
		if i == k {
			break
		}
		fmt.Fprintf(&b, "\n    %5.1f%% of statement time (%.0f ms, %d calls), %.3f calls/job, %.3f ms mean; %d rows, %.1f buffers and %.1f WAL records a row: %s",
			100*d.total/c.totalTime(), d.total, d.calls, float64(d.calls)/float64(max(c.jobs, 1)), d.total/float64(d.calls),
			d.rows, float64(d.buffers)/float64(max(d.rows, 1)), float64(d.wal)/float64(max(d.rows, 1)), d.query)
	}
	return b.String()
}

func (c cost) totalTime() float64 {
	t := 0.0
	for _, d := range c.top {
		t += d.total
	}
	return max(t, 1e-9)
}
