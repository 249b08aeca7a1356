package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/jobfence/jobfence/queue/pgqueue"
)

func runLimits(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("limits", flag.ContinueOnError)
	fs.SetOutput(stderr)
	databaseURL := databaseURLFlag(fs)
	asJSON := fs.Bool("json", false, "list: print a JSON array for scripts")
	q := fs.String("queue", "", "set: the queue whose jobs the limit governs (required)")
	kind := fs.String("kind", "", "set: only the jobs of this kind (default every kind of the queue)")
	partitionBy := fs.String("partition-by", "", "set: args fields whose values make a job's partition, comma-separated (default one partition)")
	concurrency := fs.Int("concurrency", 0, "set: at most this many jobs of a partition at once (0: no cap)")
	rate := fs.Int("rate", 0, "set: at most this many starts of a partition per --period (0: no cap)")
	period := fs.Duration("period", 0, "set: the rate's window, e.g. 1s or 1m")
	sequence := fs.Bool("sequence", false, "set: one job of a partition at a time, in insert order, a failed job holding its sequence")
	onFailure := fs.String("on-failure", "", "set: release, hold or halt: whether a failed job keeps its slot (default release, hold for a sequence)")
	fairBy := fs.String("fair-by", "", "set: an args field (a tenant): a partition's slots go round-robin across its values rather than to the oldest job")
	fairWeights := fs.String("fair-weights", "", "set: weights of --fair-by values, e.g. acme=3,globex=2: the jobs a value gets a turn (default 1)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: jobfence limits [--database-url URL] list [--json] | set NAME --queue Q [--kind K] [--partition-by F,G] [--concurrency N] [--rate N --period D] [--sequence] [--on-failure P] [--fair-by F [--fair-weights V=W,...]] | delete NAME")
		fs.PrintDefaults()
	}
	action, rest, err := parseAction(fs, args, "list, set NAME or delete NAME")
	if err != nil {
		return err
	}
	var name string
	switch action {
	case "list":
	case "set", "delete":
		if len(rest) == 0 || rest[0] == "" {
			fs.Usage()
			return fmt.Errorf("%s wants the limit's name", action)
		}
		name, rest = rest[0], rest[1:]
	default:
		return fmt.Errorf("unknown limits action %q: want list, set or delete", action)
	}
	if len(rest) != 0 {
		fs.Usage()
		return fmt.Errorf("unexpected arguments after %s: %q", action, rest)
	}
	if *asJSON && action != "list" {
		return fmt.Errorf("--json applies to list, not %s", action)
	}
	c, pool, err := openClient(ctx, databaseURL())
	if err != nil {
		return err
	}
	defer closeClient(c, pool)
	switch action {
	case "set":
		l := pgqueue.Limit{Name: name, Queue: *q, Kind: *kind, Concurrency: *concurrency, Rate: *rate, Period: *period,
			Sequence: *sequence, OnFailure: pgqueue.FailurePolicy(*onFailure)}
		if *partitionBy != "" {
			l.PartitionBy = strings.Split(*partitionBy, ",")
		}
		if l.FairBy, l.FairWeights, err = parseFair(*fairBy, *fairWeights); err != nil {
			return err
		}
		if err := c.SetLimit(ctx, l); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "limit %s set; every instance applies it at its next grant\n", name)
		return nil
	case "delete":
		if err := c.DeleteLimit(ctx, name); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "limit %s deleted; its waiting jobs are released\n", name)
		return nil
	}
	uses, err := c.LimitUses(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, toLimitsJSON(uses))
	}
	if len(uses) == 0 {
		fmt.Fprintln(stdout, "no limits: set one with jobfence limits set NAME --queue Q --concurrency N")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tQUEUE\tKIND\tPARTITION BY\tCONCURRENCY\tIN USE\tRATE\tSTARTED\tON FAILURE\tFAIR BY\tPARTITIONS\tWAITING")
	for _, u := range uses {
		conc, inUse, rate, started := "-", "-", "-", "-"
		if u.Concurrency > 0 {
			conc, inUse = fmt.Sprint(u.Concurrency), fmt.Sprint(u.InUse)
		}
		if u.Rate > 0 {
			rate, started = fmt.Sprintf("%d/%s", u.Rate, u.Period), fmt.Sprint(u.StartedInPeriod)
		}
		waiting := fmt.Sprint(u.Waiting)
		if u.WaitingCapped {
			waiting += "+"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", u.Name, u.Queue, orDash(u.Kind), orDash(strings.Join(u.PartitionBy, ",")),
			conc, inUse, rate, started, u.OnFailure, orDash(formatFair(u.FairBy, u.FairWeights)), u.Partitions, waiting)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// limitJSON is one limit in `jobfence limits list --json`.
type limitJSON struct {
	Name            string         `json:"name"`
	Queue           string         `json:"queue"`
	Kind            string         `json:"kind,omitempty"`
	PartitionBy     []string       `json:"partition_by"`
	Concurrency     int            `json:"concurrency,omitempty"`
	InUse           int64          `json:"in_use"`
	Rate            int            `json:"rate,omitempty"`
	PeriodSeconds   float64        `json:"period_seconds,omitempty"`
	StartedInPeriod int64          `json:"started_in_period"`
	Sequence        bool           `json:"sequence"`
	OnFailure       string         `json:"on_failure"`
	FairBy          string         `json:"fair_by,omitempty"`
	FairWeights     map[string]int `json:"fair_weights,omitempty"`
	Partitions      int64          `json:"partitions"`
	Waiting         int64          `json:"waiting"`
	WaitingCapped   bool           `json:"waiting_capped"`
}

func toLimitsJSON(uses []pgqueue.LimitUse) []limitJSON {
	out := make([]limitJSON, len(uses))
	for i, u := range uses {
		out[i] = limitJSON{Name: u.Name, Queue: u.Queue, Kind: u.Kind, PartitionBy: u.PartitionBy, Concurrency: u.Concurrency,
			InUse: u.InUse, Rate: u.Rate, PeriodSeconds: u.Period.Seconds(), StartedInPeriod: u.StartedInPeriod, Sequence: u.Sequence,
			OnFailure: string(u.OnFailure), FairBy: u.FairBy, FairWeights: u.FairWeights, Partitions: u.Partitions, Waiting: u.Waiting,
			WaitingCapped: u.WaitingCapped}
	}
	return out
}

// parseFair reads --fair-by and --fair-weights.
func parseFair(by, weights string) (string, map[string]int, error) {
	w, err := pgqueue.ParseFairWeights(weights)
	if err != nil {
		return "", nil, fmt.Errorf("--fair-weights: %w", err)
	}
	return by, w, nil
}

// formatFair is a limit's FAIR BY column: its field, and its weights in
// parentheses where it has some.
func formatFair(by string, weights map[string]int) string {
	if by == "" || len(weights) == 0 {
		return by
	}
	return by + " (" + pgqueue.FormatFairWeights(weights) + ")"
}
