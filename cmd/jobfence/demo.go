package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/examples/cron-fleet/fleet"
	"github.com/jobfence/jobfence/examples/durable-steps/durable"
	"github.com/jobfence/jobfence/examples/inventory/shop"
	"github.com/jobfence/jobfence/examples/kafka-rebalance/rebalance"
	"github.com/jobfence/jobfence/examples/killed-worker/killed"
	"github.com/jobfence/jobfence/examples/order-workflow/orderflow"
	"github.com/jobfence/jobfence/examples/paused-worker/paused"
	"github.com/jobfence/jobfence/examples/payment-retry/payments"
	"github.com/jobfence/jobfence/examples/rate-limited-provider/provider"
	harness "github.com/jobfence/jobfence/examples/scenario"
	"github.com/jobfence/jobfence/examples/stampede/hotkey"
	"github.com/jobfence/jobfence/internal/devenv"
	"github.com/jobfence/jobfence/internal/devenv/kafkaenv"
	"github.com/jobfence/jobfence/jobfencetest/devserver"
	"github.com/jobfence/jobfence/migrations"
)

// errDemoFailed is returned by the demo when a scenario's invariant failed.
var errDemoFailed = errors.New("invariant failed")

// scenario is one of the ten scenarios of the demo: the same code as the
// example program of the same scenario under examples/ (see package
// examples/scenario for why). The units name what its counts count, for
// the table.
type scenario struct {
	name                      string
	attempts, effects, reject string
	run                       func(ctx context.Context, env *harness.Env) (harness.Result, error)
}

// scenarios lists the demo's scenarios in the order of DESIGN.md, then
// the rate-limited provider (flow control, issue 29), the workflow and
// the durable job (issue 51).
func scenarios() []scenario {
	return []scenario{
		{"cron on 20 instances", "enqueues", "jobs", "duplicates", fleet.Run},
		{"payment retried", "requests", "charges", "replayed", payments.Run},
		{"last item, 10 buyers", "purchases", "sales", "refused/replayed", shop.Run},
		{"paused worker (SIGSTOP)", "writes", "shipments", "stale", paused.Run},
		{"killed worker (SIGKILL)", "attempts", "shipments", "stale", killed.Run},
		{"kafka rebalance", "handler runs", "effects", "absorbed", rebalance.Run},
		{"cold hot key, 1,000 readers", "reads", "computations", "waited", hotkey.Run},
		{"rate-limited provider, 10 workers", "calls", "completed", "over limit", provider.Run},
		{"workflow step paused (SIGSTOP)", "task runs", "task effects", "stale", orderflow.Run},
		{"durable steps, SIGKILL + SIGSTOP", "claims", "step effects", "replayed", durable.Run},
	}
}

// outcome is what a scenario measured.
type outcome = harness.Result

// result is a scenario's outcome, or the error that stopped it.
type result struct {
	n int // the scenario's number in DESIGN.md
	scenario
	outcome
	err error
}

// pass reports whether r's invariant held.
func (r result) pass() bool { return r.verdict() == "PASS" }

// verdict is PASS or FAIL with the reason.
func (r result) verdict() string {
	if r.err != nil {
		return "FAIL: " + r.err.Error()
	}
	return r.outcome.Verdict()
}

// writeTable prints the results as a table and returns errDemoFailed if any
// scenario failed.
func writeTable(w io.Writer, results []result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tscenario\tattempted\ttook effect\tstale/dup rejected\tverdict")
	failed := 0
	for _, r := range results {
		if !r.pass() {
			failed++
		}
		fmt.Fprintf(tw, "%d\t%s\t%d %s\t%d %s\t%d %s\t%s\n", r.n, r.name,
			r.Attempted, r.attempts, r.Effects, r.effects, r.Rejected, r.reject, r.verdict())
	}
	tw.Flush()
	if failed > 0 {
		return fmt.Errorf("%w in %d of %d scenarios", errDemoFailed, failed, len(results))
	}
	return nil
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	only := fs.String("only", "", "comma-separated scenario numbers to run (default: all ten)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (flags: --only)", fs.Arg(0))
	}
	all := scenarios()
	picked, err := pickScenarios(*only, len(all))
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this executable to run worker processes: %w", err)
	}

	fmt.Fprintln(stdout, "jobfence demo: starting services (DATABASE_URL, REDIS_URL and KAFKA_BROKERS are used when set)")
	env, err := devenv.Start(ctx, devenv.Options{Postgres: true, Redis: true})
	if err != nil {
		return err
	}
	defer env.Close()
	kafka, err := kafkaenv.Provide(kafkaenv.Options{})
	if err != nil {
		return err
	}
	defer kafka.Close()

	schema, err := devserver.CreateSchema(ctx, env.DatabaseURL, "jobfence_demo_")
	if err != nil {
		return err
	}
	defer schema.Drop(context.Background())
	if err := migrations.Up(ctx, schema.URL); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, schema.URL)
	if err != nil {
		return err
	}
	defer pool.Close()
	fmt.Fprintf(stdout, "jobfence demo: PostgreSQL schema %s, Redis %s, Kafka %s\n\n", schema.Name, env.RedisURL, strings.Join(kafka.Addrs, ","))

	var mu sync.Mutex
	var results []result
	start := time.Now()
	for _, i := range picked {
		sc := all[i]
		p := func(format string, args ...any) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(stdout, "[%d/%d] %s: %s\n", i+1, len(all), sc.name, fmt.Sprintf(format, args...))
		}
		t0 := time.Now()
		o, err := sc.run(ctx, &harness.Env{
			DatabaseURL: schema.URL, Pool: pool, RedisURL: env.RedisURL, KafkaBrokers: kafka.Addrs,
			Logger:        slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError})),
			Progress:      p,
			WorkerProcess: demoWorkerProcess(self, schema.URL, stderr),
		})
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted during scenario %d: %w", i+1, context.Cause(ctx))
		}
		r := result{n: i + 1, scenario: sc, outcome: o, err: err}
		p("%s in %.1fs", r.verdict(), time.Since(t0).Seconds())
		results = append(results, r)
	}
	fmt.Fprintf(stdout, "\n%d scenarios in %.1fs\n", len(results), time.Since(start).Seconds())
	return writeTable(stdout, results)
}

// pickScenarios parses --only: "" means all n scenarios, else a list such
// as "4,5" of numbers from 1 to n. It returns zero-based indexes in order.
func pickScenarios(only string, n int) ([]int, error) {
	if only == "" {
		var all []int
		for i := range n {
			all = append(all, i)
		}
		return all, nil
	}
	var picked []int
	for _, f := range strings.Split(only, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 1 || k > n {
			return nil, fmt.Errorf("--only %q: %q is not a scenario number from 1 to %d", only, f, n)
		}
		if !slices.Contains(picked, k-1) {
			picked = append(picked, k-1)
		}
	}
	slices.Sort(picked)
	return picked, nil
}
