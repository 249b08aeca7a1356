package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/scheduler"
)

// schedulesUsage is the usage line of jobfence schedules.
const schedulesUsage = `usage: jobfence schedules [--database-url URL] ACTION
  list [--json]                      the schedules in the table
  add NAME SPEC KIND [--args JSON] [--queue Q] [--priority N] [--max-attempts N]
      [--time-zone ZONE] [--catch-up skip|latest|all] [--catch-up-window D]
      [--skip-if-running] [--replace]
                                     add a schedule that every instance fires
                                     (--replace: change an existing one)
  pause NAME [--by WHO]              no instance enqueues its fires until resume
  resume NAME                        its fires from now on are enqueued again
  delete NAME                        remove it from the table; its jobs stay
  trigger NAME                       enqueue one fire now ("run now")`

func runSchedules(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("schedules", flag.ContinueOnError)
	fs.SetOutput(stderr)
	databaseURL := databaseURLFlag(fs)
	asJSON := fs.Bool("json", false, "list: print a JSON array for scripts")
	by := fs.String("by", "", "pause: who pauses it, as recorded and shown by list (default user@host)")
	jobArgs := fs.String("args", "", "add: the jobs' arguments, a JSON value (default {})")
	queueName := fs.String("queue", "", "add: the jobs' queue (default \"default\")")
	priority := fs.Int("priority", 0, "add: the jobs' priority, 1 (first) to 4 (default 1)")
	maxAttempts := fs.Int("max-attempts", 0, "add: the jobs' attempts (default 25)")
	timeZone := fs.String("time-zone", "", "add: the IANA zone the spec is read in (default UTC)")
	catchUp := fs.String("catch-up", "skip", "add: what becomes of fires missed while no instance ran: skip, latest or all")
	window := fs.Duration("catch-up-window", 0, "add: how far back latest and all look (default half the job retention)")
	skip := fs.Bool("skip-if-running", false, "add: skip a fire while an earlier one's job is unfinished")
	replace := fs.Bool("replace", false, "add: change the definition of a schedule that exists")
	fs.Usage = func() {
		fmt.Fprintln(stderr, schedulesUsage)
		fs.PrintDefaults()
	}
	const want = "list, add NAME SPEC KIND, pause NAME, resume NAME, delete NAME or trigger NAME"
	action, rest, err := parseAction(fs, args, want)
	if err != nil {
		return err
	}
	operands := 1
	switch action {
	case "list":
		operands = 0
	case "add":
		operands = 3
	case "pause", "resume", "delete", "trigger":
	default:
		return fmt.Errorf("unknown schedules action %q: want %s", action, want)
	}
	if len(rest) < operands || (operands > 0 && rest[0] == "") {
		fs.Usage()
		if action == "add" {
			return errors.New("add wants the schedule's name, its spec (quoted: \"0 3 * * *\") and the jobs' kind")
		}
		return fmt.Errorf("%s wants the schedule's name", action)
	}
	if len(rest) > operands {
		fs.Usage()
		return fmt.Errorf("unexpected arguments after %s: %q", action, rest[operands:])
	}
	if *asJSON && action != "list" {
		return fmt.Errorf("--json applies to list, not %s", action)
	}
	if *by != "" && action != "pause" {
		return fmt.Errorf("--by applies to pause, not %s", action)
	}
	if action != "add" {
		var set []string
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "args", "queue", "priority", "max-attempts", "time-zone", "catch-up", "catch-up-window", "skip-if-running", "replace":
				set = append(set, "--"+f.Name)
			}
		})
		if len(set) > 0 {
			return fmt.Errorf("%s applies to add, not %s", set[0], action)
		}
	}
	var def addDefinition
	if action == "add" {
		def = addDefinition{name: rest[0], spec: rest[1], kind: rest[2], replace: *replace}
		policy, err := scheduler.ParseCatchUpPolicy(*catchUp)
		if err != nil {
			return fmt.Errorf("--catch-up: %w", err)
		}
		def.opts = scheduler.Options{
			Queue: *queueName, Priority: *priority, MaxAttempts: *maxAttempts, TimeZone: *timeZone,
			CatchUp: policy, CatchUpWindow: *window, SkipIfRunning: *skip,
		}
		if *jobArgs != "" {
			if !json.Valid([]byte(*jobArgs)) {
				return fmt.Errorf("--args is not valid JSON: %s", *jobArgs)
			}
			def.args = json.RawMessage(*jobArgs)
		}
	}
	c, pool, err := openClient(ctx, databaseURL())
	if err != nil {
		return err
	}
	defer closeClient(c, pool)
	var name string
	if len(rest) > 0 {
		name = rest[0]
	}
	switch action {
	case "add":
		return addSchedule(ctx, pool, def, stdout)
	case "pause":
		who := *by
		if who == "" {
			who = defaultActor()
		}
		changed, err := scheduler.Pause(ctx, pool, name, who)
		if err != nil {
			return scheduleError(err, name)
		}
		if !changed {
			i, err := scheduler.Get(ctx, pool, name)
			if err != nil {
				return scheduleError(err, name)
			}
			fmt.Fprintf(stdout, "schedule %q was already paused, since %s by %s; nothing changed\n", name, formatTime(i.PausedAt), i.PausedBy)
			return nil
		}
		fmt.Fprintf(stdout, "schedule %q paused by %s: no instance enqueues its fires until it is resumed\n", name, who)
		return nil
	case "resume":
		changed, err := scheduler.Resume(ctx, pool, name)
		if err != nil {
			return scheduleError(err, name)
		}
		if !changed {
			fmt.Fprintf(stdout, "schedule %q was not paused; nothing changed\n", name)
			return nil
		}
		fmt.Fprintf(stdout, "schedule %q resumed: every instance enqueues its fires again within a few seconds; those of the pause are not caught up\n", name)
		return nil
	case "delete":
		i, err := scheduler.Get(ctx, pool, name)
		if errors.Is(err, scheduler.ErrNotFound) {
			return fmt.Errorf("no schedule named %q", name)
		}
		if err != nil {
			return err
		}
		found, err := scheduler.Delete(ctx, pool, name)
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("no schedule named %q", name)
		}
		fmt.Fprintf(stdout, "deleted schedule %q; the jobs of its fires are kept\n", name)
		if !i.Runtime {
			fmt.Fprintf(stdout, "note: %q is defined in code: it comes back when an instance that defines it starts; remove it from the code, or pause it instead\n", name)
		}
		return nil
	case "trigger":
		f, err := scheduler.Trigger(ctx, c, name)
		if err != nil {
			return scheduleError(err, name)
		}
		if !f.Inserted {
			fmt.Fprintf(stdout, "schedule %q was triggered at %s, less than %v ago: its job %d stands; no job added\n",
				name, formatTime(f.At), scheduler.TriggerWindow, f.JobID)
			return nil
		}
		fmt.Fprintf(stdout, "triggered schedule %q: job %d, fire %s\n", name, f.JobID, formatTime(f.At))
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
	fmt.Fprintln(w, "NAME\tSPEC\tTIME ZONE\tKIND\tSTATUS\tNEXT FIRE\tLAST ENQUEUED\tUPDATED")
	for _, i := range infos {
		status, next := "active", formatTime(i.NextFire)
		if i.Paused {
			status, next = "paused", "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			i.Name, i.Spec, i.TimeZone, i.Kind, status, next, formatTime(i.LastFire), formatTime(i.UpdatedAt))
	}
	return w.Flush()
}

// addDefinition is what jobfence schedules add was given.
type addDefinition struct {
	name, spec, kind string
	args             json.RawMessage
	opts             scheduler.Options
	replace          bool
}

// addSchedule puts def, refusing to change an existing schedule unless
// def.replace.
func addSchedule(ctx context.Context, pool *pgxpool.Pool, def addDefinition, stdout io.Writer) error {
	if !def.replace {
		i, err := scheduler.Get(ctx, pool, def.name)
		switch {
		case err == nil:
			origin := "added at run time"
			if !i.Runtime {
				origin = "defined in code"
			}
			return fmt.Errorf("schedule %q exists (%s, spec %q, kind %s): pass --replace to change its definition", def.name, origin, i.Spec, i.Kind)
		case !errors.Is(err, scheduler.ErrNotFound):
			return err
		}
	}
	var args any
	if def.args != nil {
		args = def.args
	}
	created, err := scheduler.Put(ctx, pool, def.name, def.spec, def.kind, args, def.opts)
	if err != nil {
		return err
	}
	i, err := scheduler.Get(ctx, pool, def.name)
	if err != nil {
		return err
	}
	verb := "added"
	if !created {
		verb = "changed"
	}
	fmt.Fprintf(stdout, "%s schedule %q (%s, kind %s, queue %s): every instance picks it up within a few seconds; next fire %s\n",
		verb, def.name, def.spec, def.kind, i.Queue, formatTime(i.NextFire))
	if !created && !i.Runtime {
		fmt.Fprintf(stdout, "note: %q is defined in code: the code's definition comes back when an instance that defines it starts\n", def.name)
	}
	if i.Paused {
		fmt.Fprintf(stdout, "note: %q is paused; resume it with: jobfence schedules resume %s\n", def.name, def.name)
	}
	return nil
}

// scheduleError says which schedule a not-found error is about.
func scheduleError(err error, name string) error {
	if errors.Is(err, scheduler.ErrNotFound) {
		return fmt.Errorf("no schedule named %q", name)
	}
	return err
}

// formatTime prints t in UTC to the second, or "-" for the zero time.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}
