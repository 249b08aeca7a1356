// Package examples_test checks the promise that each example is code a
// user can copy: every directory here, copied alone into a fresh module
// that requires jobfence, builds there. A copy that imported jobfence's
// internal/ packages would not.
package examples_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// copiedModule is the module path the copies get, as a user's would.
const copiedModule = "example.com/x"

func TestEachExampleBuildsWhenCopiedIntoAFreshModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every example in a module of its own: skipped with -short")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	mod := t.TempDir()
	var copied []string
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") || e.Name() == "testdata" {
			continue
		}
		if err := copyExample(e.Name(), filepath.Join(mod, e.Name())); err != nil {
			t.Fatal(err)
		}
		copied = append(copied, e.Name())
	}
	if len(copied) == 0 {
		t.Fatal("no example directories found")
	}
	// One module for all the copies: each sits in a directory of its own
	// and imports nothing of the others, so building them together proves
	// the same as one module each, with one dependency resolution.
	goCmd(t, mod, "mod", "init", copiedModule)
	goCmd(t, mod, "mod", "edit", "-require=github.com/jobfence/jobfence@v0.0.0", "-replace=github.com/jobfence/jobfence="+root)
	// The copy requires what jobfence's go.mod requires, at the same
	// versions, and trusts its go.sum: what go get of jobfence would give
	// a user's module. Resolving the graph afresh (go mod tidy) would need
	// go.mod files that no build of jobfence downloads (old versions named
	// by dependencies' dependencies), so offline, on a machine whose module
	// cache holds only what jobfence builds with, it failed.
	goCmd(t, mod, append([]string{"mod", "edit"}, requirements(t, root)...)...)
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mod, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	goCmd(t, mod, "build", "./...")
	goCmd(t, mod, "vet", "./...")
	t.Logf("built %d copied examples: %v", len(copied), copied)
}

// copyExample copies the example directory src to dst, pointing imports
// of its own sub-packages at the copy, as a user who copies it would.
func copyExample(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.HasSuffix(path, ".go") {
			b = []byte(strings.ReplaceAll(string(b), `"github.com/jobfence/jobfence/examples/`, `"`+copiedModule+`/`))
		}
		return os.WriteFile(target, b, 0o644)
	})
}

func goCmd(t *testing.T, dir string, args ...string) {
	t.Helper()
	if out, err := runGo(dir, args...); err != nil {
		t.Fatalf("go %s in the copied module: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// requirements returns jobfence's own requirements, in root's go.mod, as
// go mod edit -require flags.
func requirements(t *testing.T, root string) []string {
	t.Helper()
	out, err := runGo(root, "mod", "edit", "-json")
	if err != nil {
		t.Fatalf("go mod edit -json: %v\n%s", err, out)
	}
	var m struct {
		Require []struct{ Path, Version string }
	}
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	flags := make([]string, 0, len(m.Require))
	for _, r := range m.Require {
		flags = append(flags, "-require="+r.Path+"@"+r.Version)
	}
	return flags
}

func runGo(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	// The module cache already holds every module jobfence builds with;
	// going to the network would only make the test slow or flaky.
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOSUMDB=off", "GOWORK=off")
	return cmd.CombinedOutput()
}
