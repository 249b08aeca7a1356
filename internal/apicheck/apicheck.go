// Package apicheck computes the exported API of jobfence's public packages,
// one declaration a line, so that a test can compare it with the file
// committed as api/v0.txt and a change to the API cannot land unnoticed:
// the file must be regenerated (JOBFENCE_UPDATE_API=1 go test
// ./internal/apicheck) and CHANGELOG.md's Unreleased section must record
// the new file's hash, which makes whoever changes the API touch the
// changelog. What counts as a break before 1.0 is in docs/compatibility.md.
//
// The API is read from the source alone (go/build to choose the files,
// go/parser for their declarations), without type-checking: it costs a
// parse of the public packages, well under a second, and needs nothing
// beyond the standard library. Its lines follow the format of Go's own
// api/*.txt files:
//
//	pkg github.com/jobfence/jobfence/queue, func Params(JobArgs, *InsertOpts) (EncodedArgs, error)
//	pkg github.com/jobfence/jobfence/queue, method (*Job) IdempotencyKey() string
//	pkg github.com/jobfence/jobfence/queue, type InsertOpts struct, Queue string
//
// Parameter names are left out (renaming one breaks no caller); struct
// tags, unexported names, methods of unexported types, test files, files
// for other platforms than linux/amd64, and the packages under internal/,
// testdata/, examples/ and every package main are left out too.
package apicheck

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// UpdateEnv is the environment variable that makes the test rewrite the API
// file from the code instead of comparing them.
const UpdateEnv = "JOBFENCE_UPDATE_API"

// UpdateCommand is the one command that regenerates the API file.
const UpdateCommand = UpdateEnv + "=1 go test ./internal/apicheck"

// fileHeader opens the API file; Parse skips it, as every line that starts
// with "#".
const fileHeader = `# The exported API of jobfence's public packages, one declaration a line
# (internal/apicheck; docs/compatibility.md says what may change before 1.0).
# Generated: ` + UpdateCommand + `
# CHANGELOG.md's [Unreleased] section records this file's hash ("API: ...").
`

// Lines returns the exported API of every public package of the Go module
// rooted at root, sorted. A package is public unless it is a package main
// or lies under a directory named internal, testdata or examples (examples
// are copied, not imported), or under one whose name starts with "." or
// "_". A nested module (a directory with its own go.mod) is not part of
// the module and is skipped.
func Lines(root string) ([]string, error) {
	module, err := modulePath(root)
	if err != nil {
		return nil, err
	}
	ctx := build.Default
	// The same files on every machine: an API that differs by platform
	// would make the file differ by who generated it.
	ctx.GOOS, ctx.GOARCH, ctx.CgoEnabled = "linux", "amd64", true
	ctx.BuildTags, ctx.ToolTags = nil, nil

	var lines []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel != "." {
			name := d.Name()
			if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") ||
				name == "internal" || name == "testdata" || name == "vendor" || rel == "examples" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir
			}
		}
		pkg, err := ctx.ImportDir(p, 0)
		var none *build.NoGoError
		if errors.As(err, &none) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("apicheck: %s: %w", rel, err)
		}
		if pkg.Name == "main" {
			return nil
		}
		importPath := module
		if rel != "." {
			importPath = path.Join(module, rel)
		}
		got, err := packageLines(p, importPath, append(pkg.GoFiles, pkg.CgoFiles...))
		if err != nil {
			return err
		}
		lines = append(lines, got...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(lines)
	return slices.Compact(lines), nil
}

// modulePath reads the module's path from root/go.mod.
func modulePath(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("apicheck: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	return "", fmt.Errorf("apicheck: %s has no module line", filepath.Join(root, "go.mod"))
}

// packageLines parses files (names in dir) and renders their exported
// declarations, each prefixed with "pkg importPath, ".
func packageLines(dir, importPath string, files []string) ([]string, error) {
	fset := token.NewFileSet()
	var lines []string
	for _, name := range files {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("apicheck: %w", err)
		}
		for _, decl := range f.Decls {
			for _, l := range declLines(decl) {
				lines = append(lines, "pkg "+importPath+", "+l)
			}
		}
	}
	return lines, nil
}

// Render is the API file's content for lines: the header, then one line
// each.
func Render(lines []string) []byte {
	var b strings.Builder
	b.WriteString(fileHeader)
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return []byte(b.String())
}

// Parse returns the API lines of an API file's content, skipping blank
// lines and the "#" lines of its header.
func Parse(file []byte) []string {
	var lines []string
	for _, l := range strings.Split(string(file), "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		lines = append(lines, l)
	}
	return lines
}

// Hash is the hash of an API file's content that CHANGELOG.md records: the
// first 12 hex digits of its SHA-256.
func Hash(file []byte) string {
	sum := sha256.Sum256(file)
	return hex.EncodeToString(sum[:])[:12]
}

// DiffError says how the code's API differs from the API file: the lines
// the code has and the file lacks (Added), and those the file has and the
// code lacks (Removed). Its message says what to do.
type DiffError struct {
	File           string   // the API file, as the message names it
	Added, Removed []string // sorted
	NewHash        string   // the hash the file will have once regenerated
}

func (e *DiffError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the exported API differs from %s (+ in the code only, - in the file only):\n", e.File)
	for _, l := range e.Removed {
		b.WriteString("- " + l + "\n")
	}
	for _, l := range e.Added {
		b.WriteString("+ " + l + "\n")
	}
	fmt.Fprintf(&b, "If the change is meant:\n 1. regenerate the file: %s\n", UpdateCommand)
	fmt.Fprintf(&b, " 2. describe the change in CHANGELOG.md's [Unreleased] section, under Added, Changed,\n"+
		"    Deprecated or Removed (a change or removal breaks callers: docs/compatibility.md),\n"+
		"    and set its API line to:\n        %s%s\n", apiLinePrefix, e.NewHash)
	return b.String()
}

// Compare checks the code's API (got, from Lines) against the API file's
// content (file, named name in the message). It returns nil when they
// agree and a *DiffError when they do not.
func Compare(name string, file []byte, got []string) error {
	want := Parse(file)
	added, removed := diff(want, got)
	if len(added) == 0 && len(removed) == 0 {
		return nil
	}
	return &DiffError{File: name, Added: added, Removed: removed, NewHash: Hash(Render(got))}
}

// diff returns the lines of got missing from want and those of want
// missing from got, each sorted.
func diff(want, got []string) (added, removed []string) {
	in := func(s []string) map[string]bool {
		m := make(map[string]bool, len(s))
		for _, l := range s {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	for _, l := range got {
		if !w[l] {
			added = append(added, l)
		}
	}
	for _, l := range want {
		if !g[l] {
			removed = append(removed, l)
		}
	}
	slices.Sort(added)
	slices.Sort(removed)
	return added, removed
}
