// Command jobfence runs jobfence's migrations, inspects and steers jobs,
// schedules, queues and workers, benchmarks the queue and runs the demo.
//
// Usage:
//
//	jobfence <command> [flags]
//
// Run jobfence help for the commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/jobfence/jobfence/queue/pgqueue"
)

// command is one subcommand: run gets the arguments after the command's name.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() map[string]command {
	return map[string]command{
		"setup":      {"install PostgreSQL, redis-server, PgBouncer and Chromium (browser test) from Debian's packages if missing", runSetup},
		"migrate":    {"migrate up|down|reset|status|version: jobfence's schema", runMigrate},
		"bench":      {"bench [--mode burndown|continuous|both]: jobs/s of the Postgres queue", runBench},
		"jobs":       {"jobs list|show ID|retry ID|cancel ID: inspect and steer jobs", runJobs},
		"schedules":  {"schedules list|add|pause|resume|delete|trigger: cron schedules, changed while the fleet runs", runSchedules},
		"ui":         {"ui [--listen ADDR] [--read-only] [--basic-auth USER:PASS]: the web dashboard", runUI},
		"queues":     {"queues list|pause|resume|set|add|remove|reset NAME: queue counts; pausing, resizing, adding and removing queues fleet-wide", runQueues},
		"limits":     {"limits list|set NAME|delete NAME: concurrency and rate limits and sequences, changed while the fleet runs", runLimits},
		"workers":    {"workers list: the worker instances running now, from the registry", runWorkers},
		"workflows":  {"workflows list|show ID|cancel ID|retry ID: workflows, their tasks and outputs; cancel or resume one", runWorkflows},
		"encrypt":    {"encrypt rotate: re-seal encrypted job args under the current key (keys from JOBFENCE_ENCRYPTION_KEYS), online, in batches", runEncrypt},
		"dlq":        {"dlq redrive --queue Q: move a Kafka queue's dead letters back to run again", runDLQ},
		"demo":       {"demo [--only 4,5]: the ten scenarios on a simulated fleet, with a verdict table", runDemo},
		"demo-child": {"(internal) a worker process that jobfence demo pauses or kills", runDemoChild},
		"bench-proc": {"(internal) a worker process of jobfence bench --instances N", runBenchChild},
		"version":    {"version: the release, module version and VCS revision of this binary (also --version)", runVersion},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command args name and returns the exit status. Everything it
// prints passes through a redactingWriter that knows the connection strings
// of the environment and of args, so no password is ever printed.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	redact := pgqueue.NewRedactor(append([]string{os.Getenv("DATABASE_URL"), os.Getenv("REDIS_URL")}, args...)...)
	out, errOut := newRedactingWriter(stdout, redact), newRedactingWriter(stderr, redact)
	defer errOut.Flush()
	defer out.Flush()
	return runCommand(ctx, args, out, errOut)
}

func runCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout, cmds)
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" {
		args = append([]string{"version"}, args[1:]...)
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "jobfence: unknown command %q\n", args[0])
		usage(stderr, cmds)
		return 2
	}
	err := c.run(ctx, args[1:], stdout, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		// -h and --help print the command's usage; asking for help is no failure.
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "jobfence %s: %v\n", args[0], explainDBError(err))
		return 1
	}
	return 0
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "usage: jobfence <command> [flags]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(cmds))
	for n, c := range cmds {
		if strings.HasPrefix(c.summary, "(internal)") {
			continue
		}
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, cmds[n].summary)
	}
}
