package pgqueue_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jobfence/jobfence/queue"
)

// transitionMark is how a statement's doc comment names the rows of the
// state machine (queue.Transitions) that it carries out.
var transitionMark = regexp.MustCompile(`(?m)^\s*// transition: (.+)$`)

// movesJobs matches a statement that moves a job into a state: an update
// of the jobs' state, or an insert of jobs.
var movesJobs = regexp.MustCompile(`(?s)UPDATE jobfence_jobs\b.*?SET\s[^;]*?\bstate\s*=|INSERT INTO jobfence_jobs\s*\(`)

// TestEveryTransitionSiteNamesItsRow: every statement of this package that
// moves a job between states names, in its doc comment, the rows of the
// state machine it carries out; each name is a row; and every row has a
// statement that names it. A new way into or out of a state cannot be
// added without a row of docs/states.md's table.
func TestEveryTransitionSiteNamesItsRow(t *testing.T) {
	rows := map[string]bool{}
	for _, tr := range queue.Transitions() {
		rows[tr.Name] = false
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range transitionMark.FindAllStringSubmatch(string(src), -1) {
			for _, n := range strings.Split(m[1], ",") {
				n = strings.TrimSpace(n)
				if _, ok := rows[n]; !ok {
					t.Errorf("%s names transition %q, which is not a row of queue.Transitions", name, n)
				}
				rows[n] = true
			}
		}
		f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || (g.Tok != token.CONST && g.Tok != token.VAR) {
				continue
			}
			for _, s := range g.Specs {
				v := s.(*ast.ValueSpec)
				if len(v.Values) == 0 {
					continue
				}
				text := string(src[fset.Position(v.Values[0].Pos()).Offset:fset.Position(v.Values[len(v.Values)-1].End()).Offset])
				if !movesJobs.MatchString(text) {
					continue
				}
				doc := v.Doc
				if doc == nil && len(g.Specs) == 1 {
					doc = g.Doc
				}
				if doc == nil || !transitionMark.MatchString(doc.Text()) && !strings.Contains(doc.Text(), "transition: ") {
					t.Errorf("%s: %s moves jobs between states but its doc comment names no transition (\"transition: NAME\")", name, v.Names[0].Name)
				}
			}
		}
	}
	for n, seen := range rows {
		if !seen {
			t.Errorf("transition %q: no statement of pgqueue names it", n)
		}
	}
}
