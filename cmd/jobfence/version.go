package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"github.com/jobfence/jobfence"
)

// modulePath is jobfence's module, looked for in the binary's build info:
// as the main module (go install ...@v0.1.0, a build in a checkout) or as
// a dependency (the CLI built inside a service's module).
const modulePath = "github.com/jobfence/jobfence"

// runVersion prints the release (jobfence.Version) and what the Go
// toolchain stamped into the binary: the module version it was built at,
// and, for a build in a checkout, the VCS revision. The release alone
// cannot tell a v0.1.0 binary from one built at a later commit that has
// not bumped it yet; the revision can.
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, "usage: jobfence version") }
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("takes no arguments, got %q", strings.Join(fs.Args(), " "))
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		info = nil
	}
	_, err := io.WriteString(stdout, versionText(jobfence.Version, info))
	return err
}

// versionText renders the version report: the release on the first line
// ("jobfence 0.1.0"), then, when info has them, the module version, the
// VCS revision (with "(modified)" for a dirty work tree) and its time, and
// the Go version. info may be nil (a binary without build info).
func versionText(release string, info *debug.BuildInfo) string {
	var b strings.Builder
	fmt.Fprintf(&b, "jobfence %s\n", release)
	if info == nil {
		return b.String()
	}
	if v := moduleVersion(info); v != "" {
		fmt.Fprintf(&b, "module   %s %s\n", modulePath, v)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		if settings["vcs.modified"] == "true" {
			rev += " (modified)"
		}
		fmt.Fprintf(&b, "revision %s\n", rev)
	}
	if t := settings["vcs.time"]; t != "" {
		fmt.Fprintf(&b, "time     %s\n", t)
	}
	if info.GoVersion != "" {
		fmt.Fprintf(&b, "go       %s\n", info.GoVersion)
	}
	return b.String()
}

// moduleVersion is jobfence's module version in info: "v0.1.0" for a
// binary installed at a tag, a pseudo-version for one at a commit,
// "(devel)" for one built in a checkout, or "" when the module is not in
// info. A replaced dependency reports its replacement's version.
func moduleVersion(info *debug.BuildInfo) string {
	if info.Main.Path == modulePath {
		return info.Main.Version
	}
	for _, d := range info.Deps {
		if d.Path != modulePath {
			continue
		}
		if d.Replace != nil {
			return strings.TrimSpace(d.Replace.Version + " (replaced by " + d.Replace.Path + ")")
		}
		return d.Version
	}
	return ""
}
