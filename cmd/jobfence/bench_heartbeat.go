package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// heartbeatConfig shapes --mode heartbeat.
type heartbeatConfig struct {
	// leaseIndex recreates the index on lease_expires_at that migrations
	// before 00006 had, to see what it costs.
	leaseIndex bool
}

// tableStats is what pg_stat_user_tables and the relation sizes say of
// the jobs table.
type tableStats struct {
	updates, hot, dead int64
	tableBytes         int64
	indexBytes         map[string]int64
}

const tableStatsSQL = `SELECT n_tup_upd, n_tup_hot_upd, n_dead_tup, pg_relation_size(relid) FROM pg_stat_user_tables WHERE relid = $1::regclass`

// fillfactorSQL reads a table's fillfactor (PostgreSQL's default is 100).
const fillfactorSQL = `SELECT coalesce((SELECT split_part(o, '=', 2) FROM unnest(reloptions) AS o WHERE o LIKE 'fillfactor=%'), '100')
FROM pg_class WHERE oid = $1::regclass`

const indexSizesSQL = `SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM pg_index WHERE indrelid = $1::regclass`

func readTableStats(ctx context.Context, conn *pgx.Conn, table string) (tableStats, error) {
	var s tableStats
	if err := conn.QueryRow(ctx, tableStatsSQL, table).Scan(&s.updates, &s.hot, &s.dead, &s.tableBytes); err != nil {
		return s, fmt.Errorf("bench: the jobs table's statistics: %w", err)
	}
	rows, err := conn.Query(ctx, indexSizesSQL, table)
	if err != nil {
		return s, fmt.Errorf("bench: the jobs table's index sizes: %w", err)
	}
	s.indexBytes = map[string]int64{}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			rows.Close()
			return s, err
		}
		s.indexBytes[name[strings.LastIndexByte(name, '.')+1:]] = n
	}
	return s, rows.Err()
}

// runHeartbeatBench runs cfg.concurrency jobs that last the whole of
// cfg.duration, heartbeating every second, and reports how many of the
// heartbeats' updates were HOT and how the table and its indexes grew.
func runHeartbeatBench(ctx context.Context, baseURL string, cfg benchConfig, stdout io.Writer) error {
	name := fmt.Sprintf("jobfence_bench_%d", time.Now().UnixNano())
	admin, err := pgx.Connect(ctx, baseURL)
	if err != nil {
		return err
	}
	defer admin.Close(context.Background())
	url, drop, err := runSchema(ctx, admin, baseURL, name, cfg.storageOptions())
	if err != nil {
		return err
	}
	defer drop()
	table := pgx.Identifier{name, "jobfence_jobs"}.Sanitize()
	setup := []string{}
	if cfg.heartbeat.leaseIndex {
		setup = append(setup, "CREATE INDEX jobfence_jobs_lease ON "+table+" (lease_expires_at) WHERE lease_expires_at IS NOT NULL")
	}
	for _, sql := range setup {
		if _, err := admin.Exec(ctx, sql); err != nil {
			return fmt.Errorf("bench: %s: %w", sql, err)
		}
	}
	pool, err := newBenchPool(ctx, url, int32(cfg.conns))
	if err != nil {
		return err
	}
	defer pool.Close()
	quiet := slog.New(slog.DiscardHandler)
	client := pgqueue.New(pool, pgqueue.Config{Logger: quiet})
	if err := insertJobs(ctx, client, cfg.concurrency, cfg.batch, limitBench{}.args); err != nil {
		return err
	}
	done := make(chan struct{})
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[benchArgs]) error {
		select {
		case <-done:
		case <-ctx.Done():
		}
		return nil
	})
	w, err := worker.New(client, reg, worker.Config{
		ID: "bench", Queues: map[string]int{queue.DefaultQueue: cfg.concurrency}, Logger: quiet,
		Lease: 3 * time.Second, HeartbeatInterval: time.Second, JobTimeout: -1, DisableMaintenance: true,
	})
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		w.Stop(stopCtx)
	}()
	deadline := time.Now().Add(time.Minute)
	for w.Stats().Claimed < int64(cfg.concurrency) {
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: only %d of %d jobs started within a minute", w.Stats().Claimed, cfg.concurrency)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Backends flush their statistics at most once a second while busy.
	time.Sleep(1500 * time.Millisecond)
	s0, err := readTableStats(ctx, admin, table)
	if err != nil {
		return err
	}
	select {
	case <-time.After(cfg.duration):
	case <-ctx.Done():
		return ctx.Err()
	}
	s1, err := readTableStats(ctx, admin, table)
	if err != nil {
		return err
	}
	close(done)
	upd, hot := s1.updates-s0.updates, s1.hot-s0.hot
	variant := "indexes as migrated"
	if cfg.heartbeat.leaseIndex {
		variant = "with the pre-00006 index on lease_expires_at"
	}
	var ff string
	if err := admin.QueryRow(ctx, fillfactorSQL, table).Scan(&ff); err != nil {
		return fmt.Errorf("bench: the jobs table's fillfactor: %w", err)
	}
	variant += ", fillfactor " + ff
	fmt.Fprintf(stdout, "heartbeat: %d jobs running for %s, heartbeating every second (%s): %d updates, %d HOT (%.0f%%); dead tuples %d → %d; load %s\n",
		cfg.concurrency, cfg.duration, variant, upd, hot, 100*float64(hot)/float64(max(upd, 1)), s0.dead, s1.dead, loadAverage())
	names := make([]string, 0, len(s1.indexBytes))
	for n := range s1.indexBytes {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(stdout, "heartbeat: table %s → %s", kib(s0.tableBytes), kib(s1.tableBytes))
	for _, n := range names {
		fmt.Fprintf(stdout, "; %s %s → %s", n, kib(s0.indexBytes[n]), kib(s1.indexBytes[n]))
	}
	fmt.Fprintln(stdout)
	return nil
}

func kib(n int64) string { return fmt.Sprintf("%d kB", n/1024) }
