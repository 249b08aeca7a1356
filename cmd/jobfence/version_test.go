package main

import (
	"bytes"
	"context"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/jobfence/jobfence"
)

func TestVersionCommand(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		var out, errOut bytes.Buffer
		code := runCommand(context.Background(), args, &out, &errOut)
		if code != 0 {
			t.Fatalf("%q: exit %d, stderr %q", args, code, errOut.String())
		}
		first, _, _ := strings.Cut(out.String(), "\n")
		if want := "jobfence " + jobfence.Version; first != want {
			t.Errorf("%q: first line %q, want %q", args, first, want)
		}
		// A test binary has build info: at least the Go version is printed.
		if !strings.Contains(out.String(), "\ngo       go1.") {
			t.Errorf("%q: no Go version in\n%s", args, out.String())
		}
	}
}

func TestVersionRefusesArguments(t *testing.T) {
	var out, errOut bytes.Buffer
	code := runCommand(context.Background(), []string{"version", "extra"}, &out, &errOut)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if want := `jobfence version: takes no arguments, got "extra"`; !strings.Contains(errOut.String(), want) {
		t.Errorf("stderr %q, want it to contain %q", errOut.String(), want)
	}
}

func TestVersionText(t *testing.T) {
	for _, c := range []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"no build info", nil, "jobfence 0.1.0\n"},
		{
			"installed at a tag",
			&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: modulePath, Version: "v0.1.0"}},
			"jobfence 0.1.0\nmodule   github.com/jobfence/jobfence v0.1.0\ngo       go1.26.8\n",
		},
		{
			"built in a dirty checkout",
			&debug.BuildInfo{
				GoVersion: "go1.26.8",
				Main:      debug.Module{Path: modulePath, Version: "(devel)"},
				Settings: []debug.BuildSetting{
					{Key: "vcs", Value: "git"},
					{Key: "vcs.revision", Value: "e272d44c0ffee"},
					{Key: "vcs.time", Value: "2026-12-02T05:00:00Z"},
					{Key: "vcs.modified", Value: "true"},
				},
			},
			"jobfence 0.1.0\nmodule   github.com/jobfence/jobfence (devel)\nrevision e272d44c0ffee (modified)\ntime     2026-12-02T05:00:00Z\ngo       go1.26.8\n",
		},
		{
			"a dependency of a service's module",
			&debug.BuildInfo{
				Main: debug.Module{Path: "example.com/svc", Version: "(devel)"},
				Deps: []*debug.Module{
					{Path: "github.com/jackc/pgx/v5", Version: "v5.12.0"},
					{Path: modulePath, Version: "v0.1.1-0.20261203000000-abcdefabcdef"},
				},
			},
			"jobfence 0.1.0\nmodule   github.com/jobfence/jobfence v0.1.1-0.20261203000000-abcdefabcdef\n",
		},
		{
			"a replaced dependency",
			&debug.BuildInfo{
				Main: debug.Module{Path: "example.com/svc"},
				Deps: []*debug.Module{{Path: modulePath, Version: "v0.1.0", Replace: &debug.Module{Path: "../jobfence"}}},
			},
			"jobfence 0.1.0\nmodule   github.com/jobfence/jobfence (replaced by ../jobfence)\n",
		},
		{
			"jobfence not in the build",
			&debug.BuildInfo{Main: debug.Module{Path: "example.com/svc"}},
			"jobfence 0.1.0\n",
		},
	} {
		if got := versionText("0.1.0", c.info); got != c.want {
			t.Errorf("%s:\ngot  %q\nwant %q", c.name, got, c.want)
		}
	}
}
