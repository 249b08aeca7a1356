package jobfencetest_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/jobfencetest"
	"github.com/jobfence/jobfence/migrations"
)

// catalogSQL describes everything in schema $1 that the migrations make,
// each line naming the schema as "S".
const catalogSQL = `
SELECT line FROM (
    SELECT 'rel ' || c.relname || ' ' || c.relkind::text || coalesce(' of ' || p.relname, '') AS line
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_inherits i ON i.inhrelid = c.oid LEFT JOIN pg_class p ON p.oid = i.inhparent
    WHERE n.nspname = $1
  UNION ALL
    SELECT 'col ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull
        || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '') || ' ' || a.attidentity::text || a.attgenerated::text
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE n.nspname = $1 AND a.attnum > 0 AND NOT a.attisdropped AND c.relkind IN ('r', 'p', 'v')
  UNION ALL
    SELECT 'idx ' || pg_get_indexdef(x.indexrelid) || ' valid ' || x.indisvalid
    FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1
  UNION ALL
    SELECT 'con ' || c.relname || ' ' || k.conname || ' ' || pg_get_constraintdef(k.oid)
    FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1
  UNION ALL
    SELECT 'trg ' || pg_get_triggerdef(t.oid)
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = $1 AND NOT t.tgisinternal
  UNION ALL
    SELECT 'fn ' || p.proname || ' ' || pg_get_function_arguments(p.oid) || ' ' || p.prosrc
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1
  UNION ALL
    SELECT 'comment ' || c.relname || ' ' || obj_description(c.oid, 'pg_class')
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND obj_description(c.oid, 'pg_class') IS NOT NULL
) l ORDER BY line`

// TestTemplateSchemaIsTheMigratedOne: NewDB's schema, replayed from the
// server's template, holds what running the migrations makes, object for
// object, and is at the same migration version; and the template was
// used where a pg_dump of the server's version is installed (else this
// test would compare the migrations with themselves).
func TestTemplateSchemaIsTheMigratedOne(t *testing.T) {
	ctx := context.Background()
	replayed := jobfencetest.NewDB(t)
	migrated := jobfencetest.NewDB(t, jobfencetest.Options{NoMigrate: true})
	if err := migrations.Up(ctx, migrated.URL); err != nil {
		t.Fatal(err)
	}
	var templates int
	if err := replayed.Pool.QueryRow(ctx, `SELECT count(*) FROM public.jobfencetest_templates`).Scan(&templates); err != nil || templates == 0 {
		if _, statErr := os.Stat("/usr/lib/postgresql"); statErr == nil {
			t.Fatalf("no template was stored (%d, %v): NewDB ran the migrations", templates, err)
		}
		t.Logf("no template (%v): NewDB ran the migrations", err)
	}
	a, b := catalog(t, replayed.Pool, replayed.Schema), catalog(t, migrated.Pool, migrated.Schema)
	if len(a) < 50 {
		t.Fatalf("the catalog query found %d objects in the replayed schema", len(a))
	}
	seen := map[string]bool{}
	for _, l := range b {
		seen[l] = true
	}
	for _, l := range a {
		if !seen[l] {
			t.Errorf("only in the replayed schema: %s", l)
		}
		delete(seen, l)
	}
	for l := range seen {
		t.Errorf("only in the migrated schema: %s", l)
	}
	va, err := migrations.Version(ctx, replayed.URL)
	if err != nil {
		t.Fatal(err)
	}
	vb, err := migrations.Version(ctx, migrated.URL)
	if err != nil || va != vb {
		t.Fatalf("versions: replayed %d, migrated %d (%v)", va, vb, err)
	}
}

func catalog(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), catalogSQL, schema)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, strings.ReplaceAll(l, schema, "S"))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}
