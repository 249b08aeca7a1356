package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/internal/devenv"
)

// TestAutovacuumLogOnRealServer: on a server that logs autovacuum (the
// soak's setting, with a short naptime to be quick), the follower counts
// the passes of its schema's jobs table, as pg_stat_user_tables does, and
// none of another schema's table of the same name, and reads each one's
// duration.
func TestAutovacuumLogOnRealServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pg, err := devenv.StartPostgres(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop()
	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	follow, err := followAutovacuumLog(pg.LogFile(), "soak_log")
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{
		"ALTER SYSTEM SET autovacuum_naptime = '1s'",
		"SELECT pg_reload_conf()",
		"CREATE SCHEMA soak_log",
		"CREATE SCHEMA other",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	for _, schema := range []string{"soak_log", "other"} {
		table := pgx.Identifier{schema, "jobfence_jobs"}.Sanitize()
		for _, sql := range []string{
			"CREATE TABLE " + table + ` (id int) WITH (autovacuum_vacuum_threshold = 0, autovacuum_vacuum_scale_factor = 0,
				autovacuum_vacuum_insert_threshold = 1000000, log_autovacuum_min_duration = 0)`,
			"INSERT INTO " + table + " SELECT generate_series(1, 500)",
			"DELETE FROM " + table,
		} {
			if _, err := conn.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
	}
	count := func(schema string) int64 {
		var n int64
		if err := conn.QueryRow(ctx, "SELECT autovacuum_count FROM pg_stat_user_tables WHERE relid = $1::regclass",
			pgx.Identifier{schema, "jobfence_jobs"}.Sanitize()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Autovacuum comes within a naptime or so once the deletes' counts
	// reach the statistics; the bound is for a loaded machine.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if err := follow.read(); err != nil {
			t.Fatal(err)
		}
		ours, others := count("soak_log"), count("other")
		if follow.passes >= 1 && follow.passes == ours && others >= 1 {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(pg.LogFile())
			t.Fatalf("after 2 minutes: %d passes in the log, pg_stat_user_tables counts %d (the other table %d); log:\n%s",
				follow.passes, ours, others, log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if follow.last < 0 || follow.last > 2*time.Minute {
		t.Fatalf("the last pass took %s", follow.last)
	}
	if testing.Verbose() {
		log, _ := os.ReadFile(pg.LogFile())
		t.Logf("server log:\n%s", log)
	}
}

// TestAutovacuumLogPartialMessage: a message the server has not finished
// writing is read again once it has, and a pass of another schema's table,
// or an analyze, is not counted.
func TestAutovacuumLogPartialMessage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "server.log")
	if err := os.WriteFile(path, []byte("2026-11-26 04:00:00.000 UTC [1] LOG:  database system is ready\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	follow, err := followAutovacuumLog(path, "s1")
	if err != nil {
		t.Fatal(err)
	}
	pass := func(table, elapsed string) string {
		return "2026-11-26 04:00:01.000 UTC [2] LOG:  automatic vacuum of table \"postgres." + table + "\": index scans: 1\n" +
			"\tpages: 0 removed, 45 remain, 45 scanned (100.00% of total)\n" +
			"\ttuples: 500 removed, 0 remain, 0 are dead but not yet removable\n" +
			"\tWAL usage: 98 records, 1 full page images, 13517 bytes\n" +
			"\tsystem usage: CPU: user: 0.00 s, system: 0.00 s, elapsed: " + elapsed + " s\n"
	}
	analyze := "2026-11-26 04:00:02.000 UTC [2] LOG:  automatic analyze of table \"postgres.s1.jobfence_jobs\"\n" +
		"\tsystem usage: CPU: user: 0.00 s, system: 0.00 s, elapsed: 9.99 s\n"
	whole := pass("s1.jobfence_jobs", "1.25") + pass("s10.jobfence_jobs", "7.00") + analyze + pass("s1.jobfence_jobs", "258.03")
	cut := len(whole) - 20 // inside the last pass's "system usage" line
	appendLog := func(s string) {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	appendLog(whole[:cut])
	if err := follow.read(); err != nil {
		t.Fatal(err)
	}
	if follow.passes != 1 || follow.last != 1250*time.Millisecond {
		t.Fatalf("before the last message's end: %d passes, the last %s; want 1, 1.25s", follow.passes, follow.last)
	}
	appendLog(whole[cut:])
	if err := follow.read(); err != nil {
		t.Fatal(err)
	}
	if follow.passes != 2 || follow.last != 258030*time.Millisecond {
		t.Fatalf("after it: %d passes, the last %s; want 2, 4m18.03s", follow.passes, follow.last)
	}
	if err := follow.read(); err != nil || follow.passes != 2 {
		t.Fatalf("read again with nothing new: %d passes, %v", follow.passes, err)
	}
}
