package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/jobfence/jobfence/migrations"
)

// databaseURLFlag adds --database-url to fs, defaulting to $DATABASE_URL.
func databaseURLFlag(fs *flag.FlagSet) *string {
	return fs.String("database-url", os.Getenv("DATABASE_URL"), "PostgreSQL URL (default $DATABASE_URL)")
}

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbURL := databaseURLFlag(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: jobfence migrate [--database-url URL] up|down|reset|status|version")
		fs.PrintDefaults()
	}
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if *dbURL == "" {
		return errors.New("no database: pass --database-url or set DATABASE_URL")
	}
	if len(rest) != 1 {
		fs.Usage()
		return errors.New("want exactly one of up, down, reset, status, version")
	}
	switch rest[0] {
	case "up":
		if err := migrations.Up(ctx, *dbURL); err != nil {
			return err
		}
	case "down":
		if err := migrations.Down(ctx, *dbURL); err != nil {
			return err
		}
	case "reset":
		if err := migrations.Reset(ctx, *dbURL); err != nil {
			return err
		}
	case "status":
		st, err := migrations.Status(ctx, *dbURL)
		if err != nil {
			return err
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
	v, err := migrations.Version(ctx, *dbURL)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "jobfence schema version %d\n", v)
	return nil
}
