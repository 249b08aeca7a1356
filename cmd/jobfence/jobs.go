package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

func runJobs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jobs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	databaseURL := databaseURLFlag(fs)
	q := fs.String("queue", "", "list: only this queue")
	kind := fs.String("kind", "", "list: only this kind")
	state := fs.String("state", "", "list: only this state (available, scheduled, running, retryable, completed, discarded, cancelled, limited, pending)")
	limit := fs.Int("limit", 50, "list: at most this many jobs, newest first")
	tag := fs.String("tag", "", "list: only the jobs with this tag")
	argsJSON := fs.String("args", "", `list: only the jobs whose args contain this JSON object, e.g. '{"customer":"c1"}'`)
	metaJSON := fs.String("metadata", "", `list: only the jobs whose metadata holds these pairs, e.g. '{"tenant":"t1"}'`)
	idemKey := fs.String("key", "", "list: the job with this idempotency key (jobfence-<uuid>)")
	uniqueKey := fs.String("unique-key", "", "list: the job that holds this unique key")
	minID := fs.Int64("min-id", 0, "list: only jobs with this ID or above")
	maxID := fs.Int64("max-id", 0, "list: only jobs with this ID or below")
	before := fs.Int64("before", 0, "list: the page of jobs older than this ID")
	createdAfter := fs.String("created-after", "", "list: only jobs enqueued at or after this time (RFC 3339, or a duration ago: 2h)")
	createdBefore := fs.String("created-before", "", "list: only jobs enqueued before this time (RFC 3339, or a duration ago: 30m)")
	scan := fs.Int("scan", 0, fmt.Sprintf("list: read at most this many jobs to check --args, --metadata, --key and the time range (default %d)", pgqueue.DefaultScanLimit))
	force := fs.Bool("force", false, "retry: also run a completed job again, repeating its effects")
	asJSON := fs.Bool("json", false, "list, show: print JSON (an array, or one object) for scripts")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: jobfence jobs [flags] list | show ID | retry [--force] ID | cancel ID")
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
	if len(rest) == 0 {
		fs.Usage()
		return errors.New("want one of list, show, retry, cancel")
	}
	if *state != "" {
		if _, err := queue.ParseState(*state); err != nil {
			return fmt.Errorf("--state: %w", err)
		}
	}
	// With the fleet's keys in the environment, encrypted args are shown
	// in clear; without them, as "encrypted (key ID)".
	ring, err := keyRingFromEnv()
	if err != nil {
		return err
	}
	c, pool, err := openClient(ctx, dbURL)
	if err != nil {
		return err
	}
	defer closeClient(c, pool)

	action := rest[0]
	if *asJSON && action != "list" && action != "show" {
		return fmt.Errorf("--json applies to list and show, not %s", action)
	}
	if action == "list" {
		p := pgqueue.ListParams{Queue: *q, Kind: *kind, State: queue.State(*state), Limit: *limit, Tag: *tag,
			IdempotencyKey: *idemKey, UniqueKey: *uniqueKey, MinID: *minID, MaxID: *maxID, Before: *before, ScanLimit: *scan}
		if *argsJSON != "" {
			p.Args = []byte(*argsJSON)
		}
		if *metaJSON != "" {
			if err := json.Unmarshal([]byte(*metaJSON), &p.Metadata); err != nil {
				return fmt.Errorf("--metadata %q: want a JSON object of strings, such as {\"tenant\":\"t1\"}: %w", *metaJSON, err)
			}
		}
		now := time.Now()
		for _, f := range []struct {
			name, v string
			dst     *time.Time
		}{{"--created-after", *createdAfter, &p.CreatedAfter}, {"--created-before", *createdBefore, &p.CreatedBefore}} {
			if f.v == "" {
				continue
			}
			t, err := parseWhen(f.v, now)
			if err != nil {
				return fmt.Errorf("%s: %w", f.name, err)
			}
			*f.dst = t
		}
		jobs, err := c.List(ctx, p)
		if err != nil && !errors.Is(err, pgqueue.ErrSearchTooWide) {
			return err
		}
		// A search that read its bound prints what it found, then says
		// how to go on (the error).
		if *asJSON {
			out := toJobsJSON(jobs)
			for i, j := range jobs {
				out[i].Args = shownArgs(ring, j.Kind, j.EncodedArgs)
			}
			if jerr := writeJSON(stdout, out); jerr != nil {
				return jerr
			}
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tQUEUE\tKIND\tSTATE\tATTEMPT\tFENCE\tSCHEDULED\tTAGS\tLAST ERROR")
		for _, j := range jobs {
			last := "-"
			if n := len(j.Errors); n > 0 {
				last = oneLine(j.Errors[n-1].Error, 60)
			}
			tags := "-"
			if len(j.Tags) > 0 {
				tags = strings.Join(j.Tags, ",")
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d/%d\t%d\t%s\t%s\t%s\n", j.ID, j.Queue, j.Kind, j.State,
				j.Attempt, j.MaxAttempts, j.Fence, j.ScheduledAt.UTC().Format(time.DateTime), tags, last)
		}
		if ferr := tw.Flush(); ferr != nil {
			return ferr
		}
		return err
	}
	if len(rest) != 2 {
		return fmt.Errorf("jobs %s wants exactly one job ID", action)
	}
	id, err := strconv.ParseInt(rest[1], 10, 64)
	if err != nil {
		return fmt.Errorf("job ID %q is not a number", rest[1])
	}
	switch action {
	case "show":
		j, err := c.Get(ctx, id)
		if err != nil {
			return err
		}
		var wait *pgqueue.LimitWait
		if j.State == queue.StateLimited {
			if wait, err = c.LimitWait(ctx, j.ID); err != nil {
				return err
			}
		}
		if *asJSON {
			out := toJobJSON(j)
			out.Args = shownArgs(ring, j.Kind, j.EncodedArgs)
			out.Wait = toLimitWaitJSON(wait)
			return writeJSON(stdout, out)
		}
		fmt.Fprintf(stdout, "job %d\n  queue %s, kind %s, priority %d\n  state %s, attempt %d of %d, fence %d\n",
			j.ID, j.Queue, j.Kind, j.Priority, j.State, j.Attempt, j.MaxAttempts, j.Fence)
		fmt.Fprintf(stdout, "  created %s, scheduled %s\n", j.CreatedAt.UTC().Format(time.RFC3339), j.ScheduledAt.UTC().Format(time.RFC3339))
		if j.UniqueKey != "" {
			fmt.Fprintf(stdout, "  unique key %s\n", j.UniqueKey)
		}
		if len(j.Tags) > 0 {
			fmt.Fprintf(stdout, "  tags %s\n", strings.Join(j.Tags, ", "))
		}
		fmt.Fprintf(stdout, "  args %s\n  attempted by %v\n", argsText(ring, j.Kind, j.EncodedArgs), j.AttemptedBy)
		if wait != nil {
			fmt.Fprintf(stdout, "  %s\n", wait)
		}
		if j.WorkflowID != "" {
			fmt.Fprintf(stdout, "  workflow %s, task %s\n", j.WorkflowID, j.TaskName)
		}
		if j.Progress != nil {
			fmt.Fprintf(stdout, "  progress %s\n", j.Progress)
		}
		if j.Output != nil {
			fmt.Fprintf(stdout, "  output %s\n", j.Output)
		}
		for _, e := range j.Errors {
			putBack := ""
			if e.PutBack {
				putBack = " (put back; the attempt was not spent)"
			}
			fmt.Fprintf(stdout, "  attempt %d at %s%s: %s\n", e.Attempt, e.At.UTC().Format(time.RFC3339), putBack, e.Error)
			if e.Trace != "" {
				fmt.Fprintf(stdout, "    panic stack:\n%s\n", indent(strings.TrimRight(e.Trace, "\n"), "      "))
			}
		}
		printLogs(stdout, j.Logs)
		return nil
	case "retry":
		return retryJob(ctx, c, id, *force, stdout)
	case "cancel":
		if err := c.Cancel(ctx, id); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "job %d cancelled\n", id)
		return nil
	}
	return fmt.Errorf("unknown jobs action %q: want list, show, retry or cancel", action)
}

// printLogs prints each attempt's stored logs (jobfence.Logger), oldest
// attempt first, a record a line.
func printLogs(stdout io.Writer, logs []queue.AttemptLogs) {
	for _, l := range logs {
		if l.Pruned > 0 {
			fmt.Fprintf(stdout, "  (logs of %d earlier attempts not kept)\n", l.Pruned)
		}
		dropped := ""
		if l.Dropped > 0 {
			dropped = fmt.Sprintf(", %d earlier records dropped", l.Dropped)
		}
		fmt.Fprintf(stdout, "  logs of attempt %d (fence %d%s):\n", l.Attempt, l.Fence, dropped)
		for _, r := range l.Records {
			attrs := ""
			if r.Attrs != "" {
				attrs = " " + r.Attrs
			}
			fmt.Fprintf(stdout, "    %s %s %s%s\n", r.At.UTC().Format("2006-01-02T15:04:05.000Z"), r.Level, r.Message, attrs)
		}
	}
}

// retryJob runs job id again. A completed job is refused unless force is
// set, because a mistaken retry would repeat what it did (a payment).
func retryJob(ctx context.Context, c *pgqueue.Client, id int64, force bool, stdout io.Writer) error {
	err := c.Retry(ctx, id)
	switch {
	case errors.Is(err, pgqueue.ErrJobCompleted) && !force:
		return fmt.Errorf("job %d completed already: it ran successfully, and retrying would run it again, repeating its effects; "+
			"pass --force to run it again anyway", id)
	case errors.Is(err, pgqueue.ErrJobCompleted):
		if err := c.RetryForce(ctx, id); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "job %d had completed; running it again now, as --force asks: its effects will happen again\n", id)
		return nil
	case err != nil:
		return err
	}
	fmt.Fprintf(stdout, "job %d will run again now\n", id)
	return nil
}

// parseWhen reads a time as RFC 3339 or as a duration before now ("2h":
// two hours ago).
func parseWhen(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time (2026-01-02T15:04:05Z) nor a duration ago (2h)", s)
}

// indent puts prefix before every line of s.
func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}

func oneLine(s string, n int) string {
	out := make([]rune, 0, n)
	for _, r := range s {
		if r == '\n' || r == '\t' {
			r = ' '
		}
		if len(out) == n {
			return string(out) + "…"
		}
		out = append(out, r)
	}
	return string(out)
}
