package apicheck

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fixtureAPI is the API of testdata/mod: one of each kind of declaration;
// its test file, its file for another platform, and its internal, cmd,
// examples, nested-module and _hidden packages add nothing.
var fixtureAPI = []string{
	"pkg example.com/m, const Green Color",
	"pkg example.com/m, const MaxBytes untyped int",
	"pkg example.com/m, const Name untyped string",
	"pkg example.com/m, const Red Color",
	"pkg example.com/m, const Timeout = 10 * time.Second",
	"pkg example.com/m, func Open(context.Context, string, string, ...Options) (*Options, error)",
	"pkg example.com/m, func Sum[N Number]([]N) N",
	"pkg example.com/m, method (*Box[T, K]) Get(K) (T, bool)",
	"pkg example.com/m, method (Options) Close() error",
	"pkg example.com/m, type Alias = Options",
	"pkg example.com/m, type Base struct",
	"pkg example.com/m, type Base struct, ID int64",
	"pkg example.com/m, type Box[T any, K comparable] struct",
	"pkg example.com/m, type Box[T any, K comparable] struct, Ch <-chan T",
	"pkg example.com/m, type Box[T any, K comparable] struct, Items map[K]T",
	"pkg example.com/m, type Color int",
	"pkg example.com/m, type Doer interface",
	"pkg example.com/m, type Doer interface, Do(context.Context, string, ...any) (int, error)",
	"pkg example.com/m, type Doer interface, embedded io.Closer",
	"pkg example.com/m, type Doer interface, unexported methods",
	"pkg example.com/m, type Number interface",
	"pkg example.com/m, type Number interface, ~int | ~int64 | float64",
	"pkg example.com/m, type Options struct",
	"pkg example.com/m, type Options struct, Hook func(context.Context, int) error",
	"pkg example.com/m, type Options struct, Limit int",
	"pkg example.com/m, type Options struct, Size int",
	"pkg example.com/m, type Options struct, embedded *Base",
	"pkg example.com/m, type Options struct, embedded io.Reader",
	"pkg example.com/m, var Colors []Color",
	"pkg example.com/m, var Count int64",
	"pkg example.com/m, var Default *Options",
	"pkg example.com/m, var ErrGone error",
	"pkg example.com/m, var ErrWrap = fmt2(...)",
	"pkg example.com/m, var OnDone func(context.Context, int) error",
	"pkg example.com/m, var Retries int",
	"pkg example.com/m/sub, func Fetch(int64) (string, error)",
}

func TestLinesOfTheFixture(t *testing.T) {
	got, err := Lines("testdata/mod")
	if err != nil {
		t.Fatal(err)
	}
	if added, removed := diff(fixtureAPI, got); len(added)+len(removed) > 0 {
		t.Errorf("fixture's API:\nunexpected: %q\nmissing: %q", added, removed)
	}
}

func TestRenderParseRoundTrip(t *testing.T) {
	file := Render(fixtureAPI)
	if !strings.HasPrefix(string(file), "# ") || !strings.Contains(string(file), UpdateCommand) {
		t.Errorf("the file's header does not name %q:\n%s", UpdateCommand, file)
	}
	if got := Parse(file); !slices.Equal(got, fixtureAPI) {
		t.Errorf("Parse(Render(lines)) = %q, want the lines back", got)
	}
}

// copyFixture copies testdata/mod to a directory the test may change.
func copyFixture(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS("testdata/mod")); err != nil {
		t.Fatal(err)
	}
	return dst
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestChangedAPIIsCaught(t *testing.T) {
	root := copyFixture(t)
	before, err := Lines(root)
	if err != nil {
		t.Fatal(err)
	}
	file := Render(before)
	if err := Compare("api/v0.txt", file, before); err != nil {
		t.Fatalf("the unchanged API differs from its own file: %v", err)
	}
	changelog := []byte("# Changelog\n\n## [Unreleased]\n\nAPI: " + Hash(file) + "\n\n## [0.1.0] - 2026-12-02\n")
	if err := CheckChangelog(changelog, "api/v0.txt", file); err != nil {
		t.Fatalf("a changelog that records the file's hash is refused: %v", err)
	}

	// Fetch takes a string now, and a new function appears.
	writeFile(t, filepath.Join(root, "sub", "s.go"), "package s\n\n// Fetch takes a string.\nfunc Fetch(id string) (string, error) { return id, nil }\n\n// New is new.\nfunc New() {}\n")
	after, err := Lines(root)
	if err != nil {
		t.Fatal(err)
	}
	err = Compare("api/v0.txt", file, after)
	var d *DiffError
	if !errors.As(err, &d) {
		t.Fatalf("Compare after a changed signature: %v, want a *DiffError", err)
	}
	wantAdded := []string{"pkg example.com/m/sub, func Fetch(string) (string, error)", "pkg example.com/m/sub, func New()"}
	wantRemoved := []string{"pkg example.com/m/sub, func Fetch(int64) (string, error)"}
	if !slices.Equal(d.Added, wantAdded) || !slices.Equal(d.Removed, wantRemoved) {
		t.Errorf("added %q, removed %q; want %q, %q", d.Added, d.Removed, wantAdded, wantRemoved)
	}
	newFile := Render(after)
	for _, want := range []string{
		"- pkg example.com/m/sub, func Fetch(int64) (string, error)\n",
		"+ pkg example.com/m/sub, func Fetch(string) (string, error)\n",
		"regenerate the file: JOBFENCE_UPDATE_API=1 go test ./internal/apicheck\n",
		"CHANGELOG.md's [Unreleased] section",
		"API: " + Hash(newFile) + "\n",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the message lacks %q:\n%s", want, err)
		}
	}

	// Regenerated, the file matches, and the changelog's old hash is caught.
	if err := Compare("api/v0.txt", newFile, after); err != nil {
		t.Errorf("the regenerated file still differs: %v", err)
	}
	err = CheckChangelog(changelog, "api/v0.txt", newFile)
	if err == nil {
		t.Fatal("a changelog that records the old API's hash was accepted")
	}
	for _, want := range []string{
		"records API: " + Hash(file) + ", but api/v0.txt's hash is " + Hash(newFile),
		"Describe the change under [Unreleased]",
		"replace that line with:\n        API: " + Hash(newFile),
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the message lacks %q:\n%s", want, err)
		}
	}
}

func TestNonAPIChangesAreNotCaught(t *testing.T) {
	root := copyFixture(t)
	before, err := Lines(root)
	if err != nil {
		t.Fatal(err)
	}
	// Parameter names, bodies, comments, error texts, unexported names and
	// internal packages are no API.
	writeFile(t, filepath.Join(root, "sub", "s.go"), "package s\n\nfunc Fetch(key int64) (name string, err error) { return \"x\", nil }\n\nfunc other() {}\n")
	writeFile(t, filepath.Join(root, "internal", "x", "x.go"), "package x\n\nfunc Internal(n int) int { return n }\n")
	after, err := Lines(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := Compare("api/v0.txt", Render(before), after); err != nil {
		t.Errorf("a change that is no API change was caught: %v", err)
	}
}
