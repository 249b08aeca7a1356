// Package usermod makes a throwaway Go module that depends on this
// checkout of jobfence the way a user's module does, for the tests that
// build code a user would copy: the examples and the guides' snippets.
package usermod

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// New makes dir a module named path that requires jobfence from the
// checkout at root. It requires what jobfence's go.mod requires, at the
// same versions, and trusts its go.sum: what go get of jobfence gives a
// user's module. Resolving the graph afresh (go mod tidy) would need
// go.mod files that no build of jobfence downloads (old versions named by
// dependencies' dependencies), so offline, on a machine whose module cache
// holds only what jobfence builds with, it would fail.
func New(t testing.TB, dir, path, root string) {
	t.Helper()
	Must(t, dir, "mod", "init", path)
	Must(t, dir, "mod", "edit", "-require=github.com/jobfence/jobfence@v0.0.0", "-replace=github.com/jobfence/jobfence="+root)
	Must(t, dir, append([]string{"mod", "edit"}, requirements(t, root)...)...)
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Must runs the go command with args in dir (see Go) and fails t with its
// output if it fails.
func Must(t testing.TB, dir string, args ...string) {
	t.Helper()
	if out, err := Go(dir, args...); err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
}

// Go runs the go command with args in dir, offline, and returns its
// combined output. The module cache already holds every module jobfence
// builds with; going to the network would only make a test slow or flaky.
func Go(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOSUMDB=off", "GOWORK=off")
	return cmd.CombinedOutput()
}

// requirements returns jobfence's own requirements, in root's go.mod, as
// go mod edit -require flags.
func requirements(t testing.TB, root string) []string {
	t.Helper()
	out, err := Go(root, "mod", "edit", "-json")
	if err != nil {
		t.Fatalf("go mod edit -json: %v\n%s", err, out)
	}
	var m struct {
		Require []struct{ Path, Version string }
	}
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(fmt.Errorf("go mod edit -json: %w", err))
	}
	flags := make([]string, 0, len(m.Require))
	for _, r := range m.Require {
		flags = append(flags, "-require="+r.Path+"@"+r.Version)
	}
	return flags
}
