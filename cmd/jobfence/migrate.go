package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/jobfence/jobfence/migrations"
)

// databaseURLFlag adds --database-url to fs and returns a function that,
// after parsing, gives the flag's value, or $DATABASE_URL when the flag is
// absent. The flag's own default stays empty: usage prints defaults, and a
// URL's password must never be printed.
func databaseURLFlag(fs *flag.FlagSet) func() string {
	const name = "database-url"
	u := fs.String(name, "", "PostgreSQL URL (default $DATABASE_URL)")
	return func() string {
		set := false
		fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
		if set {
			return *u
		}
		return os.Getenv("DATABASE_URL")
	}
}

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	databaseURL := databaseURLFlag(fs)
	asJSON := fs.Bool("json", false, "status: print a JSON array for scripts")
	lockWait := fs.Duration("lock-wait", migrations.DefaultLockWait, "up, down, reset: how long to wait for another migration of the same schema before giving up")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: jobfence migrate [--database-url URL] [--json] [--lock-wait D] up|down|reset|status|version")
		fs.PrintDefaults()
	}
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	dbURL := databaseURL()
	if dbURL == "" {
		return errors.New("no database: pass --database-url or set DATABASE_URL")
	}
	if len(rest) != 1 {
		fs.Usage()
		return errors.New("want exactly one of up, down, reset, status, version")
	}
	if *asJSON && rest[0] != "status" {
		return fmt.Errorf("--json applies to status, not %s", rest[0])
	}
	if *lockWait <= 0 {
		return fmt.Errorf("--lock-wait %s: want a positive duration", *lockWait)
	}
	// The safe path of migrations.Up, with each retry logged to stderr.
	m := migrations.Migrator{LockWait: *lockWait, Log: slog.New(slog.NewTextHandler(stderr, nil))}
	switch rest[0] {
	case "up":
		if err := m.Up(ctx, dbURL); err != nil {
			return err
		}
	case "down":
		if err := m.Down(ctx, dbURL); err != nil {
			return err
		}
	case "reset":
		if err := m.Reset(ctx, dbURL); err != nil {
			return err
		}
	case "status":
		st, err := migrations.Status(ctx, dbURL)
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(stdout, toMigrationsJSON(st))
		}
		for _, s := range st {
			applied := "pending"
			if !s.AppliedAt.IsZero() {
				applied = "applied " + s.AppliedAt.Format("2006-01-02 15:04:05")
			}
			fmt.Fprintf(stdout, "%05d  %-28s %s\n", s.Source.Version, s.Source.Path, applied)
		}
		return nil
	case "version":
	default:
		return fmt.Errorf("unknown migrate action %q: want up, down, reset, status or version", rest[0])
	}
	v, err := migrations.Version(ctx, dbURL)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "jobfence schema version %d\n", v)
	return nil
}
