// Package examples_test checks the promise that each example is code a
// user can copy: every directory here, copied alone into a fresh module
// that requires jobfence, builds there. A copy that imported jobfence's
// internal/ packages would not.
package examples_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jobfence/jobfence/internal/usermod"
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
	usermod.New(t, mod, copiedModule, root)
	usermod.Must(t, mod, "build", "./...")
	usermod.Must(t, mod, "vet", "./...")
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
