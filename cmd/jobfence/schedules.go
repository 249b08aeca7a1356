package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/jobfence/jobfence/scheduler"
)

func runSchedules(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("schedules", flag.ContinueOnError)
	fs.SetOutput(stderr)
	databaseURL := databaseURLFlag(fs)
	asJSON := fs.Bool("json", false, "list: print a JSON array for scripts")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: jobfence schedules [--database-url URL] [--json] list | delete NAME")
		fs.PrintDefaults()
	}
	action, rest, err := parseAction(fs, args, "list or delete NAME")
	if err != nil {
		return err
	}
	var name string
	switch action {
	case "list":
	case "delete":
		if len(rest) == 0 || rest[0] == "" {
			fs.Usage()
			return errors.New("delete wants the schedule's name")
		}
		name, rest = rest[0], rest[1:]
	default:
		return fmt.Errorf("unknown schedules action %q: want list or delete", action)
	}
	if *asJSON && action != "list" {
		return fmt.Errorf("--json applies to list, not %s", action)
	}
	if len(rest) != 0 {
		fs.Usage()
		return fmt.Errorf("unexpected arguments after %s: %q", action, rest)
	}
	_, pool, err := openClient(ctx, databaseURL())
	if err != nil {
		return err
	}
	defer pool.Close()
	if action == "delete" {
		found, err := scheduler.Delete(ctx, pool, name)
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("no schedule named %q", name)
		}
		fmt.Fprintf(stdout, "deleted schedule %q; the jobs of its fires are kept\n", name)
		return nil
	}
	infos, err := scheduler.List(ctx, pool)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, toSchedulesJSON(infos))
	}
	if len(infos) == 0 {
		fmt.Fprintln(stdout, "no schedules registered")
		return nil
	}
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tSPEC\tTIME ZONE\tKIND\tNEXT FIRE\tLAST ENQUEUED\tUPDATED")
	for _, i := range infos {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			i.Name, i.Spec, i.TimeZone, i.Kind, formatTime(i.NextFire), formatTime(i.LastFire), formatTime(i.UpdatedAt))
	}
	return w.Flush()
}

// formatTime prints t in UTC to the second, or "-" for the zero time.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}
