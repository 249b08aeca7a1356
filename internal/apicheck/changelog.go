package apicheck

import (
	"fmt"
	"regexp"
	"strings"
)

// apiLinePrefix starts the line of CHANGELOG.md's [Unreleased] section that
// records the API file's Hash.
const apiLinePrefix = "API: "

var (
	apiLine        = regexp.MustCompile(`^API: ([0-9a-f]+)\s*$`)
	releaseHead    = regexp.MustCompile(`^## \[(\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?)\] - (\d{4}-\d{2}-\d{2})$`)
	unreleasedName = "[Unreleased]"
	unreleasedHead = "## " + unreleasedName
)

// sections splits a changelog into its "## " sections: each heading line
// with the lines under it, in order.
func sections(changelog []byte) [][]string {
	var out [][]string
	for _, l := range strings.Split(string(changelog), "\n") {
		l = strings.TrimRight(l, "\r")
		if strings.HasPrefix(l, "## ") {
			out = append(out, []string{l})
			continue
		}
		if len(out) > 0 {
			out[len(out)-1] = append(out[len(out)-1], l)
		}
	}
	return out
}

// RecordedHash returns the hash that the changelog's [Unreleased] section
// records on its line "API: <hash>".
func RecordedHash(changelog []byte) (string, error) {
	for _, s := range sections(changelog) {
		if s[0] != unreleasedHead {
			continue
		}
		for _, l := range s[1:] {
			if m := apiLine.FindStringSubmatch(l); m != nil {
				return m[1], nil
			}
		}
		return "", fmt.Errorf("CHANGELOG.md's %s section has no line %q", unreleasedName, apiLinePrefix+"<hash>")
	}
	return "", fmt.Errorf("CHANGELOG.md has no %q section", unreleasedHead)
}

// CheckChangelog checks that the changelog records apiFile's hash (the
// file named name in the message): the line that makes a change of the
// API touch the changelog. Its error says what to write.
func CheckChangelog(changelog []byte, name string, apiFile []byte) error {
	want := Hash(apiFile)
	got, err := RecordedHash(changelog)
	if err != nil {
		return fmt.Errorf("%w.\nAdd it, with %s's hash, after describing the API's changes under %s:\n        %s%s",
			err, name, unreleasedName, apiLinePrefix, want)
	}
	if got == want {
		return nil
	}
	return fmt.Errorf("CHANGELOG.md's %s section records %s%s, but %s's hash is %s: the exported API changed.\n"+
		"Describe the change under %s (Added, Changed, Deprecated or Removed; a change or removal\n"+
		"breaks callers: docs/compatibility.md), then replace that line with:\n        %s%s",
		unreleasedName, apiLinePrefix, got, name, want, unreleasedName, apiLinePrefix, want)
}

// NewestRelease returns the version of the changelog's newest release: the
// first "## [X.Y.Z] - YYYY-MM-DD" heading after [Unreleased]. A "## "
// heading in neither form is an error, so that a misspelt release is not
// passed over.
func NewestRelease(changelog []byte) (string, error) {
	for _, s := range sections(changelog) {
		if s[0] == unreleasedHead {
			continue
		}
		m := releaseHead.FindStringSubmatch(s[0])
		if m == nil {
			return "", fmt.Errorf("CHANGELOG.md: heading %q is neither %q nor a release, %q", s[0], unreleasedHead, "## [X.Y.Z] - YYYY-MM-DD")
		}
		return m[1], nil
	}
	return "", fmt.Errorf("CHANGELOG.md has no release heading (%q)", "## [X.Y.Z] - YYYY-MM-DD")
}
