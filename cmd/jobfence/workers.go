package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

func runWorkers(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("workers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	databaseURL := databaseURLFlag(fs)
	asJSON := fs.Bool("json", false, "list: print a JSON array for scripts")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: jobfence workers [--database-url URL] [--json] list")
		fs.PrintDefaults()
	}
	action, rest, err := parseAction(fs, args, "list")
	if err != nil {
		return err
	}
	if action != "list" {
		return fmt.Errorf("unknown workers action %q: want list", action)
	}
	if len(rest) != 0 {
		fs.Usage()
		return fmt.Errorf("unexpected arguments after list: %q", rest)
	}
	c, pool, err := openClient(ctx, databaseURL())
	if err != nil {
		return err
	}
	defer closeClient(c, pool)
	ws, err := c.Workers(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, toWorkersJSON(ws))
	}
	if len(ws) == 0 {
		fmt.Fprintln(stdout, "no workers registered: none is running, or none has reported yet")
		return nil
	}
	now := time.Now()
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tHOST\tPID\tQUEUES\tRUNNING\tCOMPLETED\tSTALE\tLOST\tSTARTED\tLAST SEEN\tSTATUS")
	for _, wi := range ws {
		status := "live"
		if !wi.Live {
			status = "missing"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d\t%d\t%d\t%d\t%s\t%s ago\t%s\n", wi.ID, wi.Host, wi.PID,
			strings.Join(wi.Queues, ","), wi.Running, wi.Completed, wi.Stale, wi.Lost,
			formatTime(wi.StartedAt), formatAge(now.Sub(wi.LastSeenAt)), status)
	}
	return w.Flush()
}
