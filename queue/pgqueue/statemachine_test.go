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

// transitionMark is how a statement's doc comment (its text, the comment
// markers gone) names the rows of the state machine (queue.Transitions)
// that it carries out.
var transitionMark = regexp.MustCompile(`(?m)^transition: (.+)$`)

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
	sites := map[string][]string{}
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
				doc := v.Doc
				if doc == nil && len(g.Specs) == 1 {
					doc = g.Doc
				}
				if doc != nil {
					for _, m := range transitionMark.FindAllStringSubmatch(doc.Text(), -1) {
						for _, n := range strings.Split(m[1], ",") {
							n = strings.TrimSpace(n)
							if _, ok := rows[n]; !ok {
								t.Errorf("%s: %s names transition %q, which is not a row of queue.Transitions", name, v.Names[0].Name, n)
							}
							rows[n] = true
							sites[n] = append(sites[n], "`"+name+"`: `"+v.Names[0].Name+"`")
						}
					}
				}
				text := string(src[fset.Position(v.Values[0].Pos()).Offset:fset.Position(v.Values[len(v.Values)-1].End()).Offset])
				if !movesJobs.MatchString(text) {
					continue
				}
				if doc == nil || !transitionMark.MatchString(doc.Text()) {
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
	checkSitesDoc(t, sites)
}

// The markers around docs/states.md's list of each transition's statements.
const (
	sitesBegin = "<!-- sites:begin (generated from the statements' \"transition:\" comments; JOBFENCE_UPDATE_DOCS=1 go test ./queue/pgqueue -run TestEveryTransitionSiteNamesItsRow rewrites it) -->\n"
	sitesEnd   = "<!-- sites:end -->"
)

// checkSitesDoc keeps docs/states.md's table of where each transition is
// carried out equal to the statements' markers, so that a reader finds
// every way into and out of a state from one page.
func checkSitesDoc(t *testing.T, sites map[string][]string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("| transition | statements (queue/pgqueue) |\n|---|---|\n")
	for _, tr := range queue.Transitions() {
		b.WriteString("| `" + tr.Name + "` | " + strings.Join(sites[tr.Name], ", ") + " |\n")
	}
	const path = "../../docs/states.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i, j := strings.Index(s, sitesBegin), strings.Index(s, sitesEnd)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the markers %q and %q", path, sitesBegin, sitesEnd)
	}
	if s[i+len(sitesBegin):j] == b.String() {
		return
	}
	if os.Getenv("JOBFENCE_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(path, []byte(s[:i+len(sitesBegin)]+b.String()+s[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's table of statements differs from their \"transition:\" comments; run JOBFENCE_UPDATE_DOCS=1 go test ./queue/pgqueue -run TestEveryTransitionSiteNamesItsRow", path)
}
