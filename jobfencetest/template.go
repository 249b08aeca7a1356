package jobfencetest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/jobfencetest/devserver"
	"github.com/jobfence/jobfence/migrations"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// Why a template: running the migrations for every test's schema costs
// goose's transaction per migration, and a CREATE INDEX CONCURRENTLY
// among them waits for every older transaction on the server, those of
// the tests beside it included. The schema the migrations make does not
// depend on when they run (maintenance makes the finished jobs'
// partitions), so one migrated schema per server, dumped by pg_dump once,
// is replayed in one transaction instead (docs/testing.md has the cost).
// Where pg_dump is missing or of another major version than the server,
// the migrations run as before.

// templateTable holds, on each server, the schema DDL by version: a hash
// of the migration files, so that a changed migration makes a new one.
const templateTable = "public.jobfencetest_templates"

// templateToken stands for the schema's name in a stored template.
const templateToken = "jobfencetest_template_schema"

// dumpNoise matches what a dump holds that replaying it into an existing
// schema must not run: psql meta-commands (\restrict) and the schema's
// CREATE SCHEMA.
var dumpNoise = regexp.MustCompile(`(?m)^(\\.*|CREATE SCHEMA .*;)$`)

// migrate brings schema s, fresh and empty, to the migrations' latest
// version: by replaying the server's template, made on first use, or by
// running the migrations where no template can be had.
func migrate(ctx context.Context, baseURL string, s *devserver.Schema) error {
	ddl, err := template(ctx, baseURL)
	if err != nil || ddl == "" {
		return migrations.Up(ctx, s.URL)
	}
	c, err := pgx.Connect(ctx, baseURL)
	if err != nil {
		return fmt.Errorf("connect %s: %w", pgqueue.RedactConnString(baseURL), pgqueue.RedactError(err, baseURL))
	}
	defer c.Close(context.Background())
	sql := "BEGIN;\n" + strings.ReplaceAll(ddl, templateToken, s.Name) + "\nCOMMIT;"
	if _, err := c.PgConn().Exec(ctx, sql).ReadAll(); err != nil {
		return fmt.Errorf("replay the migrated template into %s: %w", s.Name, err)
	}
	return nil
}

// template returns the server's template DDL for the current migrations,
// making it when the server has none: "" with no error where pg_dump
// cannot make one.
func template(ctx context.Context, baseURL string) (string, error) {
	version, err := migrationsVersion()
	if err != nil {
		return "", err
	}
	c, err := pgx.Connect(ctx, baseURL)
	if err != nil {
		return "", err
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+templateTable+` (version text PRIMARY KEY, ddl text NOT NULL)`); err != nil {
		// Two first uses at once: one CREATE loses on the catalog's
		// unique index; the table is there either way.
		if _, err2 := c.Exec(ctx, `SELECT 1 FROM `+templateTable+` LIMIT 0`); err2 != nil {
			return "", err
		}
	}
	var ddl string
	err = c.QueryRow(ctx, `SELECT ddl FROM `+templateTable+` WHERE version = $1`, version).Scan(&ddl)
	if err == nil {
		return ddl, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return "", err
	}
	var serverMajor int
	if err := c.QueryRow(ctx, `SELECT current_setting('server_version_num')::int / 10000`).Scan(&serverMajor); err != nil {
		return "", err
	}
	dump, ok := pgDump(serverMajor)
	if !ok {
		return "", nil
	}
	if ddl, err = makeTemplate(ctx, baseURL, dump); err != nil {
		return "", err
	}
	if _, err := c.Exec(ctx, `INSERT INTO `+templateTable+` (version, ddl) VALUES ($1, $2) ON CONFLICT (version) DO NOTHING`, version, ddl); err != nil {
		return "", err
	}
	return ddl, nil
}

// makeTemplate migrates a schema of its own, dumps it with the pg_dump at
// path, and drops it.
func makeTemplate(ctx context.Context, baseURL, dump string) (string, error) {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	s, err := devserver.CreateSchema(ctx, baseURL, "jobfencetest_tpl_"+hex.EncodeToString(b)+"_")
	if err != nil {
		return "", err
	}
	defer s.Drop(context.Background())
	if err := migrations.Up(ctx, s.URL); err != nil {
		return "", err
	}
	// pg_dump takes the URL without the search_path the schema's URL has.
	cmd := exec.CommandContext(ctx, dump, "--schema="+s.Name, "--no-owner", "--no-privileges", "--inserts", "--dbname="+baseURL)
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("pg_dump: %w", pgqueue.RedactError(err, baseURL))
	}
	ddl := dumpNoise.ReplaceAllString(string(out), "")
	if !strings.Contains(ddl, s.Name+".") {
		return "", fmt.Errorf("pg_dump's output names no object of schema %s", s.Name)
	}
	return strings.ReplaceAll(ddl, s.Name, templateToken), nil
}

// pgDump finds a pg_dump of the server's major version among Debian's
// installs and on PATH.
func pgDump(major int) (string, bool) {
	candidates, _ := filepath.Glob("/usr/lib/postgresql/" + strconv.Itoa(major) + "/bin/pg_dump")
	if p, err := exec.LookPath("pg_dump"); err == nil {
		candidates = append(candidates, p)
	}
	for _, p := range candidates {
		out, err := exec.Command(p, "--version").Output()
		if err != nil {
			continue
		}
		// "pg_dump (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)"
		f := strings.Fields(string(out))
		if len(f) >= 3 && strings.HasPrefix(f[2], strconv.Itoa(major)+".") {
			return p, true
		}
	}
	return "", false
}

// migrationsVersion hashes the migration files' names and contents.
func migrationsVersion() (string, error) {
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		b, err := fs.ReadFile(migrations.FS, n)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", n, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}
