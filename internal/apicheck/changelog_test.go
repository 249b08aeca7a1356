package apicheck

import (
	"strings"
	"testing"
)

func TestRecordedHash(t *testing.T) {
	for _, c := range []struct {
		name, changelog, want, err string
	}{
		{"recorded", "# Changelog\n\n## [Unreleased]\n\nNothing yet.\n\nAPI: 0123456789ab\n\n## [0.1.0] - 2026-12-02\n", "0123456789ab", ""},
		{"only in a release section", "## [Unreleased]\n\n## [0.1.0] - 2026-12-02\n\nAPI: 0123456789ab\n", "",
			`CHANGELOG.md's [Unreleased] section has no line "API: <hash>"`},
		{"no unreleased section", "# Changelog\n\n## [0.1.0] - 2026-12-02\n", "", `CHANGELOG.md has no "## [Unreleased]" section`},
	} {
		got, err := RecordedHash([]byte(c.changelog))
		if got != c.want || (err == nil) != (c.err == "") || (err != nil && err.Error() != c.err) {
			t.Errorf("%s: RecordedHash = %q, %v; want %q, %q", c.name, got, err, c.want, c.err)
		}
	}
}

func TestCheckChangelogWithoutAnAPILine(t *testing.T) {
	file := Render([]string{"pkg example.com/m, func F()"})
	err := CheckChangelog([]byte("## [Unreleased]\n\n## [0.1.0] - 2026-12-02\n"), "api/v0.txt", file)
	if err == nil || !strings.Contains(err.Error(), "has no line") || !strings.HasSuffix(err.Error(), "\n        API: "+Hash(file)) {
		t.Errorf("CheckChangelog without an API line: %v; want it to name the line to add, API: %s", err, Hash(file))
	}
}

func TestNewestRelease(t *testing.T) {
	for _, c := range []struct {
		name, changelog, want, err string
	}{
		{"first after unreleased", "# Changelog\n\n## [Unreleased]\n\n## [0.2.0] - 2027-01-05\n\n## [0.1.0] - 2026-12-02\n", "0.2.0", ""},
		{"a pre-release", "## [1.0.0-rc.1] - 2027-03-01\n", "1.0.0-rc.1", ""},
		{"a heading without a date", "## [Unreleased]\n\n## [0.2.0]\n", "",
			`CHANGELOG.md: heading "## [0.2.0]" is neither "## [Unreleased]" nor a release, "## [X.Y.Z] - YYYY-MM-DD"`},
		{"a version with a v", "## [v0.2.0] - 2027-01-05\n", "",
			`CHANGELOG.md: heading "## [v0.2.0] - 2027-01-05" is neither "## [Unreleased]" nor a release, "## [X.Y.Z] - YYYY-MM-DD"`},
		{"no release", "## [Unreleased]\n\n### Added\n", "", `CHANGELOG.md has no release heading ("## [X.Y.Z] - YYYY-MM-DD")`},
	} {
		got, err := NewestRelease([]byte(c.changelog))
		if got != c.want || (err == nil) != (c.err == "") || (err != nil && err.Error() != c.err) {
			t.Errorf("%s: NewestRelease = %q, %v; want %q, %q", c.name, got, err, c.want, c.err)
		}
	}
}
