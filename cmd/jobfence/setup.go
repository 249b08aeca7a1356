package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/jobfence/jobfence/internal/devenv"
)

func runSetup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("setup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: jobfence setup   (installs PostgreSQL, redis-server, PgBouncer and Chromium from Debian's packages if missing; needs root)")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if err := devenv.InstallAll(ctx); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "PostgreSQL, redis-server, PgBouncer and Chromium are installed")
	return nil
}
