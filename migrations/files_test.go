package migrations_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/jobfence/jobfence/migrations"
)

var (
	// blockingRE finds what takes a lock that stops the fleet's reads or
	// writes, or rewrites rows: group 1 is CONCURRENTLY where the
	// statement has it, group 2 an UPDATE or DELETE, group 3 an index's
	// name and group 4 its table.
	blockingRE = regexp.MustCompile(`(?i)\b(?:ALTER\s+TABLE|DROP\s+TABLE|LOCK\s+TABLE|TRUNCATE|DROP\s+INDEX(\s+CONCURRENTLY)?|CREATE\s+(?:UNIQUE\s+)?INDEX(\s+CONCURRENTLY)?(?:\s+IF\s+NOT\s+EXISTS)?\s+(\w+)\s+ON\s+(\w+)|(UPDATE|DELETE\s+FROM)\s+\w+)`)
	// createdRE finds a table created in the same section.
	createdRE = regexp.MustCompile(`(?i)\bCREATE\s+(?:UNLOGGED\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)`)
	// lockTimeoutRE finds a lock_timeout set for the statement's
	// transaction.
	lockTimeoutRE = regexp.MustCompile(`(?i)SET\s+LOCAL\s+lock_timeout|set_config\('lock_timeout'`)
)

// TestMigrationFilesAreLiveSafe checks every migration file, up and down,
// against the first rules of doc.go, so that a new migration keeps them
// too: a statement that stops the fleet's reads or writes runs after a
// lock_timeout of its own transaction (in a NO TRANSACTION migration,
// inside a DO block that sets it); an index on a table that exists is
// built by CREATE INDEX CONCURRENTLY IF NOT EXISTS (a plain build may
// only precede it, in the small-table DO block); and rows are rewritten in
// a DO block that commits between batches.
func TestMigrationFilesAreLiveSafe(t *testing.T) {
	files, err := migrations.FS.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !strings.HasSuffix(f.Name(), ".sql") {
			continue
		}
		b, err := migrations.FS.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		noTx := strings.Contains(text, "-- +goose NO TRANSACTION")
		up, down, _ := strings.Cut(text, "-- +goose Down")
		for _, sec := range []struct{ name, text string }{{"up", up}, {"down", down}} {
			where := f.Name() + " " + sec.name
			created := map[string]bool{}
			for _, m := range createdRE.FindAllStringSubmatch(sec.text, -1) {
				created[strings.ToLower(m[1])] = true
			}
			timeout := false // a lock_timeout for the rest of a transaction
			for _, stmt := range statements(sec.text) {
				do := strings.HasPrefix(stmt, "DO")
				for _, m := range blockingRE.FindAllStringSubmatchIndex(stmt, -1) {
					what := stmt[m[0]:m[1]]
					if m[2] >= 0 || m[4] >= 0 { // CONCURRENTLY
						continue
					}
					if m[10] >= 0 && regexp.MustCompile(`(?i)\b(FOR|ON|DO|AFTER|BEFORE|OR)\s+$`).MatchString(stmt[:m[0]]) {
						continue // FOR UPDATE, ON UPDATE, DO UPDATE, a trigger's AFTER UPDATE: no rewrite
					}
					if m[6] >= 0 && created[strings.ToLower(stmt[m[8]:m[9]])] {
						continue // an index of a table no one else sees yet
					}
					// ON ONLY a partitioned table declares the index on the
					// parent and reads no partition (see 00031).
					if m[6] >= 0 && !strings.EqualFold(stmt[m[8]:m[9]], "ONLY") { // a plain CREATE INDEX
						name, table := stmt[m[6]:m[7]], strings.ToLower(stmt[m[8]:m[9]])
						concurrent := regexp.MustCompile(`(?i)CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+IF\s+NOT\s+EXISTS\s+` + name + `\b`)
						if !noTx || !concurrent.MatchString(sec.text) {
							t.Errorf("%s: %q builds an index on %s, which exists before it: build it CONCURRENTLY IF NOT EXISTS in a NO TRANSACTION migration (see 00007)", where, what, table)
						}
					}
					if m[10] >= 0 && !created[strings.ToLower(strings.Fields(what)[len(strings.Fields(what))-1])] &&
						!(do && regexp.MustCompile(`(?i)\bCOMMIT\b`).MatchString(stmt)) {
						t.Errorf("%s: %q rewrites rows in one transaction: do it in batches, in a DO block that commits after each (see 00009's down)", where, what)
					}
					switch {
					case noTx && !do:
						t.Errorf("%s: %q runs outside a transaction, where no lock_timeout of its own can bound it: put it in a DO block that sets one", where, what)
					case !lockTimeoutRE.MatchString(stmt[:m[0]]) && (noTx || !timeout):
						t.Errorf("%s: %q takes a lock that stops the fleet with no lock_timeout set before it in its transaction: SET LOCAL lock_timeout = '1s' first", where, what)
					}
				}
				timeout = timeout || !noTx && lockTimeoutRE.MatchString(stmt)
			}
		}
	}
}

// statements splits a section of a goose file into its statements, each
// without comments and leading blanks: a StatementBegin/End block is one,
// and elsewhere a line ending with a semicolon ends one.
func statements(section string) []string {
	var out []string
	var cur strings.Builder
	block := false
	flush := func() {
		if s := strings.TrimSpace(cur.String()); s != "" {
			out = append(out, s)
		}
		cur.Reset()
	}
	for _, line := range strings.Split(section, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "-- +goose StatementBegin":
			flush()
			block = true
			continue
		case trimmed == "-- +goose StatementEnd":
			block = false
			flush()
			continue
		case strings.HasPrefix(trimmed, "--"):
			continue
		}
		if i := strings.Index(line, "--"); i >= 0 && !strings.Contains(line[:i], "'") {
			line = line[:i]
		}
		cur.WriteString(line + "\n")
		if !block && strings.HasSuffix(strings.TrimSpace(line), ";") {
			flush()
		}
	}
	flush()
	return out
}
