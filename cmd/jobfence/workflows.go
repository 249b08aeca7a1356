package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

func runWorkflows(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("workflows", flag.ContinueOnError)
	fs.SetOutput(stderr)
	databaseURL := databaseURLFlag(fs)
	limit := fs.Int("limit", 50, "list: how many workflows, newest first")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: jobfence workflows [--database-url URL] [--limit N] list | show ID | cancel ID | retry ID")
		fs.PrintDefaults()
	}
	action, rest, err := parseAction(fs, args, "list, show ID, cancel ID or retry ID")
	if err != nil {
		return err
	}
	var id string
	switch action {
	case "list":
	case "show", "cancel", "retry":
		if len(rest) == 0 || rest[0] == "" {
			fs.Usage()
			return fmt.Errorf("workflows %s wants the workflow's ID", action)
		}
		id, rest = rest[0], rest[1:]
	default:
		return fmt.Errorf("unknown workflows action %q: want list, show, cancel or retry", action)
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
	switch action {
	case "list":
		ws, err := c.ListWorkflows(ctx, time.Time{}, *limit)
		if err != nil {
			return err
		}
		if len(ws) == 0 {
			fmt.Fprintln(stdout, "no workflows")
			return nil
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tCREATED\tTASKS\tDONE\tSTATES")
		for _, w := range ws {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", w.ID, w.Name, w.CreatedAt.UTC().Format(time.RFC3339), w.Total(), yesNo(w.Done()), stateCounts(w.Counts))
		}
		return tw.Flush()
	case "show":
		w, err := c.Workflow(ctx, id)
		if err != nil {
			return err
		}
		showWorkflow(stdout, w)
		return nil
	case "cancel":
		n, err := c.CancelWorkflow(ctx, id)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "workflow %s: %d tasks that had not started cancelled; running tasks run to their end\n", id, n)
		return nil
	}
	n, err := c.RetryWorkflow(ctx, id)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "workflow %s resumed: %d discarded or cancelled tasks run again, each once its dependencies complete\n", id, n)
	return nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// stateCounts writes counts as "completed 3, pending 1", in the order of
// queue.States.
func stateCounts(counts map[queue.State]int64) string {
	var parts []string
	for _, s := range queue.States() {
		if n := counts[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", s, n))
		}
	}
	return strings.Join(parts, ", ")
}

// showWorkflow writes a workflow's tasks, in dependency order, with what
// they wait for, how long they took, and their outputs.
func showWorkflow(out io.Writer, w *pgqueue.WorkflowInfo) {
	fmt.Fprintf(out, "workflow %s %q, created %s\n  %d tasks: %s\n", w.ID, w.Name, w.CreatedAt.UTC().Format(time.RFC3339), w.Total(), stateCounts(w.Counts))
	if w.ReleasesLeft > 0 {
		fmt.Fprintf(out, "  ranges of dependents left to release after their tasks' completion: %d (each worker's rescue pass releases them)\n", w.ReleasesLeft)
	}
	names := map[int64]string{}
	for _, t := range w.Tasks {
		names[t.ID] = t.TaskName
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tJOB\tKIND\tSTATE\tATTEMPT\tDEPENDS ON\tTOOK\tOUTPUT")
	for _, t := range w.Tasks {
		deps := make([]string, 0, len(t.DependsOn))
		for _, d := range t.DependsOn {
			deps = append(deps, names[d])
		}
		slices.Sort(deps)
		dep := strings.Join(deps, ",")
		if dep == "" {
			dep = "-"
		} else if t.State == queue.StatePending {
			dep += fmt.Sprintf(" (%d left)", t.DepsLeft)
		}
		took := "-"
		if !t.FinalizedAt.IsZero() && !t.AttemptedAt.IsZero() {
			took = t.FinalizedAt.Sub(t.AttemptedAt).Round(time.Millisecond).String()
		}
		output := "-"
		if t.Output != nil {
			output = oneLine(string(t.Output), 60)
		} else if t.State.Final() && t.State != queue.StateCompleted && len(t.Errors) > 0 {
			output = "error: " + oneLine(t.Errors[len(t.Errors)-1].Error, 80)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\t%s\t%s\n", t.TaskName, t.ID, t.Kind, t.State, t.Attempt, dep, took, output)
	}
	tw.Flush()
}
