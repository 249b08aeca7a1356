package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

func runQueues(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("queues", flag.ContinueOnError)
	fs.SetOutput(stderr)
	databaseURL := databaseURLFlag(fs)
	asJSON := fs.Bool("json", false, "list: print a JSON array for scripts")
	by := fs.String("by", "", "pause, resume, set, add, remove, reset: who does it, as recorded and shown by list (default user@host)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: jobfence queues [--database-url URL] [--json] [--by WHO] list | pause NAME | resume NAME |\n"+
			"       set NAME CONCURRENCY | add NAME CONCURRENCY | remove NAME | reset NAME")
		fmt.Fprintln(stderr, "set, add, remove and reset act on every worker of the fleet within about a second (docs/operations.md):\n"+
			"  set     every worker that works NAME runs up to CONCURRENCY of its jobs at once\n"+
			"  add     as set, and workers with worker.Config.FleetQueues start NAME too\n"+
			"  remove  no worker works NAME: each claims none of its jobs and lets the running ones finish\n"+
			"  reset   every worker goes back to its own configuration of NAME")
		fs.PrintDefaults()
	}
	const actions = "list, pause, resume, set, add, remove or reset"
	action, rest, err := parseAction(fs, args, actions)
	if err != nil {
		return err
	}
	var name string
	var concurrency int
	switch action {
	case "list":
	case "pause", "resume", "remove", "reset", "set", "add":
		if len(rest) == 0 || rest[0] == "" {
			fs.Usage()
			return fmt.Errorf("%s wants the queue's name", action)
		}
		name, rest = rest[0], rest[1:]
		if action == "set" || action == "add" {
			if len(rest) == 0 {
				fs.Usage()
				return fmt.Errorf("%s wants the queue's name and its concurrency: jobfence queues %s %s CONCURRENCY", action, action, name)
			}
			n, err := strconv.Atoi(rest[0])
			if err != nil {
				return fmt.Errorf("%s %s: concurrency %q is not a whole number", action, name, rest[0])
			}
			if err := queue.CheckQueue(name, n); err != nil {
				return fmt.Errorf("%s: %w", action, err)
			}
			concurrency, rest = n, rest[1:]
		}
	default:
		return fmt.Errorf("unknown queues action %q: want %s", action, actions)
	}
	if *asJSON && action != "list" {
		return fmt.Errorf("--json applies to list, not %s", action)
	}
	if *by != "" && action == "list" {
		return errors.New("--by applies to pause, resume, set, add, remove and reset, not list")
	}
	if len(rest) != 0 {
		fs.Usage()
		return fmt.Errorf("unexpected arguments after %s: %q", action, rest)
	}
	c, pool, err := openClient(ctx, databaseURL())
	if err != nil {
		return err
	}
	defer closeClient(c, pool)
	who := *by
	if who == "" {
		who = defaultActor()
	}
	switch action {
	case "pause":
		return pauseQueue(ctx, c, name, who, stdout)
	case "resume":
		return resumeQueue(ctx, c, name, who, stdout)
	case "set", "add", "remove", "reset":
		return setQueue(ctx, c, action, name, concurrency, who, stdout)
	}
	qs, err := c.Queues(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, toQueuesJSON(qs))
	}
	if len(qs) == 0 {
		fmt.Fprintln(stdout, "no queues: no job was enqueued and no queue was paused")
		return nil
	}
	now := time.Now()
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	// Limited and pending jobs wait as surely as available ones: without
	// their columns a queue of jobs held back by a limit looked idle.
	fmt.Fprintln(w, "QUEUE\tSTATUS\tAVAILABLE\tSCHEDULED\tLIMITED\tPENDING\tRUNNING\tRETRYABLE\tCOMPLETED\tDISCARDED\tCANCELLED\tOLDEST READY\tPAUSED SINCE\tPAUSED BY\tFLEET")
	for _, q := range qs {
		status, pausedBy := "running", "-"
		if q.Paused {
			status, pausedBy = "paused", q.PausedBy
		}
		oldest := "-"
		if !q.OldestAvailable.IsZero() {
			oldest = formatAge(now.Sub(q.OldestAvailable))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", q.Name, status,
			q.Counts[queue.StateAvailable], q.Counts[queue.StateScheduled], q.Counts[queue.StateLimited],
			q.Counts[queue.StatePending], q.Counts[queue.StateRunning],
			q.Counts[queue.StateRetryable], q.Counts[queue.StateCompleted], q.Counts[queue.StateDiscarded],
			q.Counts[queue.StateCancelled], oldest, formatTime(q.PausedAt), pausedBy, fleetSetting(q))
	}
	return w.Flush()
}

// pauseQueue pauses q and says so. A queue without a single job is most
// likely a misspelt name: the pause stands (it holds back jobs enqueued
// later), and the note says how to undo it.
func pauseQueue(ctx context.Context, c *pgqueue.Client, q, by string, stdout io.Writer) error {
	if err := c.PauseQueue(ctx, q, by); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "queue %q paused by %s: workers stop claiming its jobs within about a second; running jobs finish\n", q, by)
	// One job is enough to know the name is in use.
	jobs, err := c.List(ctx, pgqueue.ListParams{Queue: q, Limit: 1})
	if err != nil {
		return err
	}
	if len(jobs) == 0 {
		fmt.Fprintf(stdout, "note: queue %q has no jobs; if the name is misspelt, undo with: jobfence queues resume %s\n", q, q)
	}
	return nil
}

// resumeQueue resumes q and says so, or says that it was not paused.
func resumeQueue(ctx context.Context, c *pgqueue.Client, q, by string, stdout io.Writer) error {
	paused, err := c.PausedQueues(ctx, []string{q})
	if err != nil {
		return err
	}
	if err := c.ResumeQueue(ctx, q, by); err != nil {
		return err
	}
	if len(paused) == 0 {
		fmt.Fprintf(stdout, "queue %q was not paused; nothing changed\n", q)
		return nil
	}
	fmt.Fprintf(stdout, "queue %q resumed by %s: workers claim its jobs again\n", q, by)
	return nil
}

// fleetSetting shows q's stored fleet setting for list: "-" for none,
// else "set:N", "added:N" or "removed" (one word, for the table).
func fleetSetting(q pgqueue.QueueInfo) string {
	switch {
	case q.Run == queue.RunStopped:
		return "removed"
	case q.Run == queue.RunStarted:
		return fmt.Sprintf("added:%d", q.Concurrency)
	case q.Concurrency > 0:
		return fmt.Sprintf("set:%d", q.Concurrency)
	}
	return "-"
}

// setQueue changes q's stored fleet setting as action says and says what
// the workers do about it.
func setQueue(ctx context.Context, c *pgqueue.Client, action, q string, n int, by string, stdout io.Writer) error {
	var err error
	var did string
	switch action {
	case "set":
		err = c.SetQueueConcurrency(ctx, q, n, by)
		did = fmt.Sprintf("set to concurrency %d by %s: every worker that works it follows within about a second; shrinking cancels no running job", n, by)
	case "add":
		err = c.StartQueue(ctx, q, n, by)
		did = fmt.Sprintf("added at concurrency %d by %s: workers with FleetQueues start it within about a second; those that work it follow the concurrency", n, by)
	case "remove":
		err = c.StopQueue(ctx, q, by)
		did = "removed by " + by + ": every worker stops claiming its jobs within about a second and lets the running ones finish; undo with: jobfence queues reset " + q
	case "reset":
		err = c.ResetQueue(ctx, q, by)
		did = "reset by " + by + ": every worker goes back to its own configuration of it within about a second"
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "queue %q %s\n", q, did)
	return nil
}

// defaultActor names whoever runs the command, for --by: user@host.
func defaultActor() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "unknown"
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		return name
	}
	return name + "@" + host
}

// formatAge prints d to the second, or to the millisecond below a second.
func formatAge(d time.Duration) string {
	if d < time.Second {
		return max(d, 0).Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
