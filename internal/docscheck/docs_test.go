package docscheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode"

	"github.com/jobfence/jobfence/internal/usermod"
)

// doc is one Markdown file, parsed as far as the checks need.
type doc struct {
	path     string   // relative to the repository root, slash-separated
	lines    []string // the file's lines
	anchors  map[string]bool
	links    []link
	snippets []snippet
}

type link struct {
	line   int
	target string
}

type snippet struct {
	line  int    // of the opening fence, 1-based
	info  string // the fence's info string
	code  string
	given string // the declarations of a <!-- given: --> comment before it
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root %s: %v", root, err)
	}
	return root
}

// docFiles lists README.md, CHANGELOG.md and docs/**/*.md, relative to root.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md", "CHANGELOG.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, _ := filepath.Rel(root, path)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files[2:])
	return files
}

var (
	fenceRE    = regexp.MustCompile("^\\s{0,3}(```+|~~~+)\\s*(.*)$")
	headingRE  = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	linkRE     = regexp.MustCompile(`!?\[([^\]]*)\]\(([^)\s]*)(?:\s+"[^"]*")?\)`)
	codeSpanRE = regexp.MustCompile("`+[^`]*`+")
)

func parseDoc(root, rel string) (*doc, error) {
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	d := &doc{path: rel, lines: strings.Split(string(b), "\n"), anchors: map[string]bool{}}
	seen := map[string]int{}
	var (
		fence   string // the open fence's marker, "" outside code
		cur     *snippet
		body    []string
		given   string // a given comment waiting for its fence
		inGiven bool
		givenB  []string
		prose   []string // text outside code, for links; one entry per line
		proseLn []int
	)
	for i, line := range d.lines {
		n := i + 1
		if fence != "" {
			if m := fenceRE.FindStringSubmatch(line); m != nil && strings.HasPrefix(m[1], fence[:1]) && len(m[1]) >= len(fence) && strings.TrimSpace(m[2]) == "" {
				if cur != nil {
					cur.code = strings.Join(body, "\n")
					d.snippets = append(d.snippets, *cur)
				}
				fence, cur, body = "", nil, nil
				continue
			}
			body = append(body, line)
			continue
		}
		if inGiven {
			if j := strings.Index(line, "-->"); j >= 0 {
				givenB = append(givenB, line[:j])
				given, inGiven = strings.Join(givenB, "\n"), false
			} else {
				givenB = append(givenB, line)
			}
			continue
		}
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "<!-- given:") {
			rest := strings.TrimPrefix(t, "<!-- given:")
			if j := strings.Index(rest, "-->"); j >= 0 {
				given = rest[:j]
			} else {
				inGiven, givenB = true, []string{rest}
			}
			continue
		}
		if m := fenceRE.FindStringSubmatch(line); m != nil {
			fence = m[1]
			info := strings.TrimSpace(m[2])
			if f := strings.Fields(info); len(f) > 0 && f[0] == "go" {
				cur = &snippet{line: n, info: info, given: given}
			}
			given = ""
			continue
		}
		if strings.TrimSpace(line) != "" {
			given = ""
		}
		if m := headingRE.FindStringSubmatch(line); m != nil {
			s := slug(m[2])
			if k, ok := seen[s]; ok {
				seen[s] = k + 1
				s = fmt.Sprintf("%s-%d", s, k+1)
			} else {
				seen[s] = 0
			}
			d.anchors[s] = true
		}
		prose = append(prose, line)
		proseLn = append(proseLn, n)
	}
	if fence != "" {
		return nil, fmt.Errorf("%s: a code fence is never closed", rel)
	}
	// Links may wrap across lines: match on the prose joined, after
	// dropping code spans (a bracket in code is no link).
	text := codeSpanRE.ReplaceAllStringFunc(strings.Join(prose, "\n"), func(s string) string {
		return strings.Map(func(r rune) rune {
			if r == '\n' {
				return r
			}
			return ' '
		}, s)
	})
	for _, m := range linkRE.FindAllStringSubmatchIndex(text, -1) {
		line := proseLn[strings.Count(text[:m[0]], "\n")]
		d.links = append(d.links, link{line: line, target: text[m[4]:m[5]]})
	}
	return d, nil
}

// slug is GitHub's anchor for a heading: its text as rendered, lowercase,
// with every character but letters, digits, '_', '-' and spaces dropped,
// and spaces turned into '-'.
func slug(heading string) string {
	heading = linkRE.ReplaceAllString(heading, "$1")
	heading = strings.NewReplacer("`", "", "*", "").Replace(heading)
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), unicode.Is(unicode.Mn, r), r == '_', r == '-':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

func parseDocs(t *testing.T, root string) map[string]*doc {
	t.Helper()
	docs := map[string]*doc{}
	for _, rel := range docFiles(t, root) {
		d, err := parseDoc(root, rel)
		if err != nil {
			t.Fatal(err)
		}
		docs[rel] = d
	}
	return docs
}

// anchorsOf returns the anchors of the Markdown file rel (relative to
// root), parsing it if it is not among docs.
func anchorsOf(root, rel string, docs map[string]*doc) (map[string]bool, error) {
	if d, ok := docs[rel]; ok {
		return d.anchors, nil
	}
	d, err := parseDoc(root, rel)
	if err != nil {
		return nil, err
	}
	docs[rel] = d
	return d.anchors, nil
}

// checkTarget resolves target, a link written in the file from (relative
// to root), and reports why it does not resolve, or "".
func checkTarget(root, from, target string, docs map[string]*doc) string {
	if target == "" {
		return "empty link"
	}
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return ""
	}
	path, anchor, _ := strings.Cut(target, "#")
	rel := from
	if path != "" {
		if strings.HasPrefix(path, "/") {
			return "absolute path: GitHub resolves it against its own root; link relatively"
		}
		rel = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(from), path)))
		if rel == ".." || strings.HasPrefix(rel, "../") {
			return "points outside the repository"
		}
		fi, err := os.Stat(filepath.Join(root, rel))
		if err != nil {
			return fmt.Sprintf("%s does not exist", rel)
		}
		if fi.IsDir() {
			rel += "/README.md"
		}
	}
	if anchor == "" {
		return ""
	}
	if !strings.HasSuffix(rel, ".md") {
		return fmt.Sprintf("an anchor into %s, which is not Markdown", rel)
	}
	anchors, err := anchorsOf(root, rel, docs)
	if err != nil {
		return err.Error()
	}
	if !anchors[anchor] {
		return fmt.Sprintf("%s has no heading whose anchor is #%s", rel, anchor)
	}
	return ""
}

func TestLinksResolve(t *testing.T) {
	root := repoRoot(t)
	docs := parseDocs(t, root)
	n := 0
	for _, rel := range docFiles(t, root) {
		for _, l := range docs[rel].links {
			n++
			if why := checkTarget(root, rel, l.target, docs); why != "" {
				t.Errorf("%s:%d: link %q: %s", rel, l.line, l.target, why)
			}
		}
	}
	t.Logf("%d links checked", n)
}

// TestPackageDocsPointToGuides checks every "docs/....md" a doc.go names.
func TestPackageDocsPointToGuides(t *testing.T) {
	root := repoRoot(t)
	docs := parseDocs(t, root)
	ref := regexp.MustCompile(`docs/[A-Za-z0-9_-][A-Za-z0-9_./-]*\.md(#[A-Za-z0-9_-]+)?`)
	n := 0
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || d.Name() != "doc.go" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, m := range ref.FindAllString(string(b), -1) {
			n++
			if why := checkTarget(root, "README.md", m, docs); why != "" {
				t.Errorf("%s names %s: %s", rel, m, why)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d references to guides checked", n)
}

func TestReadmeIsAFrontPage(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > 300 {
		t.Errorf("README.md has %d lines; keep it a front page of at most 300, and move the rest to a guide in docs/", n)
	}
}

func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Guarantees, and what is not guaranteed":          "guarantees-and-what-is-not-guaranteed",
		"7. Set `server_login_retry` low":                 "7-set-server_login_retry-low",
		"/metrics":                                        "metrics",
		"Exactly-once database effects: DoTx":             "exactly-once-database-effects-dotx",
		"What a put-back promises: every attempt counted": "what-a-put-back-promises-every-attempt-counted",
		"See [the guide](docs/x.md) *now*":                "see-the-guide-now",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

// The fragments' standard givens: what a guide's fragment may use without
// declaring it. Each is a declaration; a given that uses another (job uses
// SendInvoice) brings it along.
var standardGivens = map[string]string{
	"ctx":         "var ctx context.Context",
	"pool":        "var pool *pgxpool.Pool",
	"bouncedPool": "var bouncedPool *pgxpool.Pool",
	"jobs":        "var jobs *pgqueue.Client",
	"client":      "var client *jobfence.Client",
	"reg":         "var reg *worker.Registry",
	"tx":          "var tx pgx.Tx",
	"job":         "var job *worker.Job[SendInvoice]",
	"databaseURL": "var databaseURL string",
	"r":           "var r *http.Request",
	"mux":         "var mux *http.ServeMux",
	"SendInvoice": "type SendInvoice struct {\n\tInvoiceID int64 `json:\"invoice_id\"`\n}\n\nfunc (SendInvoice) Kind() string { return \"send_invoice\" }",
}

// knownPackages maps the package names fragments use to import paths.
var knownPackages = map[string]string{
	"context":           "context",
	"errors":            "errors",
	"fmt":               "fmt",
	"log":               "log",
	"slog":              "log/slog",
	"os":                "os",
	"signal":            "os/signal",
	"syscall":           "syscall",
	"time":              "time",
	"http":              "net/http",
	"sql":               "database/sql",
	"json":              "encoding/json",
	"expvar":            "expvar",
	"strings":           "strings",
	"testing":           "testing",
	"pgx":               "github.com/jackc/pgx/v5",
	"pgxpool":           "github.com/jackc/pgx/v5/pgxpool",
	"pgconn":            "github.com/jackc/pgx/v5/pgconn",
	"redis":             "github.com/redis/go-redis/v9",
	"otel":              "go.opentelemetry.io/otel",
	"trace":             "go.opentelemetry.io/otel/trace",
	"sdktrace":          "go.opentelemetry.io/otel/sdk/trace",
	"sdkmetric":         "go.opentelemetry.io/otel/sdk/metric",
	"jobfence":          "github.com/jobfence/jobfence",
	"queue":             "github.com/jobfence/jobfence/queue",
	"pgqueue":           "github.com/jobfence/jobfence/queue/pgqueue",
	"kafkaqueue":        "github.com/jobfence/jobfence/queue/kafkaqueue",
	"worker":            "github.com/jobfence/jobfence/worker",
	"scheduler":         "github.com/jobfence/jobfence/scheduler",
	"idempotency":       "github.com/jobfence/jobfence/idempotency",
	"stampede":          "github.com/jobfence/jobfence/stampede",
	"migrations":        "github.com/jobfence/jobfence/migrations",
	"telemetry":         "github.com/jobfence/jobfence/telemetry",
	"kafkatelemetry":    "github.com/jobfence/jobfence/telemetry/kafkatelemetry",
	"stampedetelemetry": "github.com/jobfence/jobfence/telemetry/stampedetelemetry",
	"dashboard":         "github.com/jobfence/jobfence/dashboard",
	"jobfencetest":      "github.com/jobfence/jobfence/jobfencetest",
	"workflow":          "github.com/jobfence/jobfence/workflow",
	"devserver":         "github.com/jobfence/jobfence/jobfencetest/devserver",
}

var pathCommentRE = regexp.MustCompile(`^//\s*([A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*\.go)\s*$`)

// isFullFile reports whether code starts, after comments and blank lines,
// with a package clause.
func isFullFile(code string) bool {
	for _, line := range strings.Split(code, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case t == "", strings.HasPrefix(t, "//"):
			continue
		default:
			return strings.HasPrefix(t, "package ")
		}
	}
	return false
}

// dirName is a directory name for the snippets of the Markdown file rel.
func dirName(rel string) string {
	return strings.NewReplacer("/", "_", ".", "_", "-", "_").Replace(rel)
}

// generated is one file of the throwaway module.
type generated struct {
	path string // in the module
	code []byte
	from string // rel:line, for messages
}

// snippetFiles turns the snippets of every doc into files of the module.
func snippetFiles(t *testing.T, docs map[string]*doc, order []string) (files []generated, skipped int) {
	t.Helper()
	for _, rel := range order {
		d := docs[rel]
		for _, s := range d.snippets {
			from := fmt.Sprintf("%s:%d", rel, s.line)
			if slices.Contains(strings.Fields(s.info), "not-compiled") {
				skipped++
				continue
			}
			if isFullFile(s.code) {
				first, _, _ := strings.Cut(s.code, "\n")
				path := fmt.Sprintf("%s/L%d/snippet.go", dirName(rel), s.line)
				if m := pathCommentRE.FindStringSubmatch(strings.TrimSpace(first)); m != nil {
					path = dirName(rel) + "/" + m[1]
				}
				files = append(files, generated{path: path, code: []byte(fmt.Sprintf("// Code from %s. DO NOT EDIT.\n\n%s\n", from, s.code)), from: from})
				continue
			}
			code, err := fragmentFile(s, from)
			if err != nil {
				t.Errorf("%s: %v", from, err)
				continue
			}
			files = append(files, generated{path: fmt.Sprintf("%s/L%d/fragment.go", dirName(rel), s.line), code: code, from: from})
		}
	}
	return files, skipped
}

// fragmentFile wraps a fragment into a file of package p.
func fragmentFile(s snippet, from string) ([]byte, error) {
	decls, stmts, err := splitFragment(s.code)
	if err != nil {
		return nil, fmt.Errorf("a Go fragment that parses neither as declarations nor as statements: %v", err)
	}
	fset := token.NewFileSet()
	// What the fragment declares at the top level, and what it uses.
	declared := map[string]bool{}
	if decls != "" {
		f, err := parser.ParseFile(fset, "", "package p\n"+decls, 0)
		if err != nil {
			return nil, err
		}
		for name := range topLevelNames(f) {
			declared[name] = true
		}
	}
	if s.given != "" {
		f, err := parser.ParseFile(fset, "", "package p\n"+s.given, 0)
		if err != nil {
			return nil, fmt.Errorf("its <!-- given: --> comment: %v", err)
		}
		for name := range topLevelNames(f) {
			declared[name] = true
		}
	}
	var body strings.Builder
	body.WriteString(decls)
	if stmts != "" {
		f, err := parser.ParseFile(fset, "", "package p\nfunc _() {\n"+stmts+"\n}", 0)
		if err != nil {
			return nil, err
		}
		fn := f.Decls[0].(*ast.FuncDecl)
		fmt.Fprintf(&body, "\nfunc _() {\n%s\n", stmts)
		for _, name := range definedNames(fn.Body.List) {
			fmt.Fprintf(&body, "\t_ = %s\n", name)
		}
		body.WriteString("}\n")
	}
	// Add the givens the code uses, and those the givens use, until none
	// is missing.
	src := s.given + "\n" + body.String()
	added := map[string]bool{}
	for {
		used := usedIdents(src)
		var more []string
		for name := range standardGivens {
			if used[name] && !declared[name] && !added[name] {
				more = append(more, name)
			}
		}
		if len(more) == 0 {
			break
		}
		sort.Strings(more)
		for _, name := range more {
			added[name] = true
			src = standardGivens[name] + "\n\n" + src
		}
	}
	// Imports for the packages it names.
	used := selectorBases(src)
	var imports []string
	for name, path := range knownPackages {
		if used[name] && !declared[name] && !added[name] {
			imp := fmt.Sprintf("%q", path)
			if !strings.HasSuffix(path, "/"+name) && path != name {
				imp = name + " " + imp
			}
			imports = append(imports, imp)
		}
	}
	sort.Strings(imports)
	var out strings.Builder
	fmt.Fprintf(&out, "// Code from %s. DO NOT EDIT.\n\npackage p\n\n", from)
	if len(imports) > 0 {
		fmt.Fprintf(&out, "import (\n\t%s\n)\n\n", strings.Join(imports, "\n\t"))
	}
	out.WriteString(src)
	return []byte(out.String()), nil
}

// splitFragment splits code into leading declarations and the statements
// after them; either may be empty.
func splitFragment(code string) (decls, stmts string, err error) {
	fset := token.NewFileSet()
	if _, err := parser.ParseFile(fset, "", "package p\n"+code, 0); err == nil {
		return code, "", nil
	}
	_, stmtErr := parser.ParseFile(fset, "", "package p\nfunc _() {\n"+code+"\n}", 0)
	if stmtErr == nil {
		return "", code, nil
	}
	lines := strings.Split(code, "\n")
	for i := 1; i < len(lines); i++ {
		d, s := strings.Join(lines[:i], "\n"), strings.Join(lines[i:], "\n")
		if _, err := parser.ParseFile(fset, "", "package p\n"+d, 0); err != nil {
			continue
		}
		if _, err := parser.ParseFile(fset, "", "package p\nfunc _() {\n"+s+"\n}", 0); err == nil {
			return d, s, nil
		}
	}
	return "", "", stmtErr
}

func topLevelNames(f *ast.File) map[string]bool {
	names := map[string]bool{}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				names[d.Name.Name] = true
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					names[s.Name.Name] = true
				case *ast.ValueSpec:
					for _, n := range s.Names {
						names[n.Name] = true
					}
				}
			}
		}
	}
	return names
}

// definedNames lists the variables that statements declare at their top
// level (x := ..., var x ...), so that each can be marked used.
func definedNames(list []ast.Stmt) []string {
	var names []string
	seen := map[string]bool{}
	add := func(n string) {
		if n != "_" && !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	for _, s := range list {
		switch s := s.(type) {
		case *ast.AssignStmt:
			if s.Tok == token.DEFINE {
				for _, e := range s.Lhs {
					if id, ok := e.(*ast.Ident); ok {
						add(id.Name)
					}
				}
			}
		case *ast.DeclStmt:
			if g, ok := s.Decl.(*ast.GenDecl); ok && g.Tok == token.VAR {
				for _, sp := range g.Specs {
					for _, n := range sp.(*ast.ValueSpec).Names {
						add(n.Name)
					}
				}
			}
		}
	}
	return names
}

// usedIdents returns every identifier in src, a sequence of declarations.
func usedIdents(src string) map[string]bool {
	used := map[string]bool{}
	f, err := parser.ParseFile(token.NewFileSet(), "", "package p\n"+src, 0)
	if err != nil {
		return used // the build reports it
	}
	ast.Inspect(f, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok {
			used[id.Name] = true
		}
		return true
	})
	return used
}

// selectorBases returns the identifiers used as X in X.Sel.
func selectorBases(src string) map[string]bool {
	used := map[string]bool{}
	f, err := parser.ParseFile(token.NewFileSet(), "", "package p\n"+src, 0)
	if err != nil {
		return used
	}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok {
				used[id.Name] = true
			}
		}
		return true
	})
	return used
}

// TestGoSnippetsCompile writes every Go snippet into one module and vets it.
func TestGoSnippetsCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every Go snippet of the docs in a module of its own: skipped with -short")
	}
	root := repoRoot(t)
	order := docFiles(t, root)
	docs := parseDocs(t, root)
	files, skipped := snippetFiles(t, docs, order)
	if t.Failed() {
		return
	}
	if len(files) == 0 {
		t.Fatal("no Go snippets found")
	}
	mod := t.TempDir()
	for _, f := range files {
		p := filepath.Join(mod, filepath.FromSlash(f.path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(p); err == nil {
			t.Fatalf("%s: two snippets of one Markdown file name the same file %s", f.from, f.path)
		}
		if err := os.WriteFile(p, f.code, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A user's module, which builds offline from the module cache jobfence
	// builds with.
	usermod.New(t, mod, "example.com/docsnippets", root)
	if out, err := usermod.Go(mod, "vet", "./..."); err != nil {
		t.Errorf("Go snippets of the docs do not compile (each file's first line names its snippet; paths are <markdown file>/L<line of its fence>):\n%s", out)
		for _, f := range files {
			if strings.Contains(string(out), f.path[:strings.LastIndex(f.path, "/")]) {
				t.Logf("--- %s (%s):\n%s", f.path, f.from, f.code)
			}
		}
	}
	t.Logf("compiled %d Go snippets (%d marked not-compiled skipped)", len(files), skipped)
}
