package apicheck

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/jobfence/jobfence"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// apiFile is the committed API, relative to root.
const apiFile = "api/v0.txt"

// TestAPIMatchesFile compares the exported API of jobfence's public
// packages with api/v0.txt. With JOBFENCE_UPDATE_API=1 it rewrites the
// file first; TestChangelogRecordsTheAPI then says what to write in
// CHANGELOG.md.
func TestAPIMatchesFile(t *testing.T) {
	got, err := Lines(root)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, apiFile)
	if os.Getenv(UpdateEnv) != "" {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, Render(got), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s: %d declarations, hash %s", apiFile, len(got), Hash(Render(got)))
	}
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v; generate it with %s", err, UpdateCommand)
	}
	if err := Compare(apiFile, file, got); err != nil {
		t.Fatal(err)
	}
}

// TestChangelogRecordsTheAPI checks that CHANGELOG.md's [Unreleased]
// section records api/v0.txt's hash, so that a change to the API file
// comes with a change to the changelog.
func TestChangelogRecordsTheAPI(t *testing.T) {
	changelog, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(filepath.Join(root, apiFile))
	if err != nil {
		t.Fatalf("%v; generate it with %s", err, UpdateCommand)
	}
	if err := CheckChangelog(changelog, apiFile, file); err != nil {
		t.Fatal(err)
	}
}

// TestVersionIsTheNewestRelease checks that jobfence.Version is the newest
// release in CHANGELOG.md: cutting a release moves both.
func TestVersionIsTheNewestRelease(t *testing.T) {
	changelog, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	newest, err := NewestRelease(changelog)
	if err != nil {
		t.Fatal(err)
	}
	if newest != jobfence.Version {
		t.Errorf("jobfence.Version is %q (version.go) but CHANGELOG.md's newest release is %q: a release sets both", jobfence.Version, newest)
	}
}
