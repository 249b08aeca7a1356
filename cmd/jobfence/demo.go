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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/internal/devenv"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/migrations"
)

// errDemoFailed is returned by the demo when a scenario's invariant failed.
var errDemoFailed = errors.New("invariant failed")

// scenario is one of the seven scenarios of the demo. The units name what
// its counts count, for the table.
type scenario struct {
	name                      string
	attempts, effects, reject string
	run                       func(ctx context.Context, d *demo, p progress) (outcome, error)
}

// scenarios lists the demo's scenarios in the order of DESIGN.md.
func scenarios() []scenario {
	return []scenario{
		{"cron on 20 instances", "enqueues", "jobs", "duplicates", demoCron},
		{"payment retried", "requests", "charges", "replayed", demoPayment},
		{"last item, 10 buyers", "purchases", "sales", "refused/replayed", demoInventory},
		{"paused worker (SIGSTOP)", "writes", "shipments", "stale", demoPaused},
		{"killed worker (SIGKILL)", "attempts", "shipments", "stale", demoKilled},
		{"kafka rebalance", "handler runs", "effects", "absorbed", demoKafka},
		{"cold hot key, 1,000 readers", "reads", "computations", "waited", demoStampede},
	}
}

// outcome is what a scenario measured. A scenario passes when Effects
// equals WantEffects and Problems is empty.
type outcome struct {
	// Attempted counts the attempts to take effect: fires, requests,
	// handler runs, reads.
	Attempted int64
	// Effects counts the effects that took effect, read back from where
	// they are stored.
	Effects int64
	// WantEffects is how many effects the scenario's invariant allows.
	WantEffects int64
	// Rejected counts the attempts refused or absorbed: duplicates by an
	// idempotency key, stale writes by a fence, readers by the lock.
	Rejected int64
	// Problems lists every other invariant that failed.
	Problems []string
}

// result is a scenario's outcome, or the error that stopped it.
type result struct {
	n int // the scenario's number in DESIGN.md
	scenario
	outcome
	err error
}

// pass reports whether r's invariant held.
func (r result) pass() bool {
	return r.err == nil && r.Effects == r.WantEffects && len(r.Problems) == 0
}

// verdict is PASS or FAIL with the reason.
func (r result) verdict() string {
	switch {
	case r.err != nil:
		return "FAIL: " + r.err.Error()
	case r.Effects != r.WantEffects:
		return fmt.Sprintf("FAIL: %d effects, want %d", r.Effects, r.WantEffects)
	case len(r.Problems) > 0:
		return "FAIL: " + strings.Join(r.Problems, "; ")
	}
	return "PASS"
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

// progress prints one progress line of a scenario.
type progress func(format string, args ...any)

// demo holds what the scenarios share: the services and a schema of the
// demo's own.
type demo struct {
	url      string // DATABASE_URL with the demo's schema as search_path
	pool     *pgxpool.Pool
	redisURL string
	brokers  []string
	self     string // this executable, re-executed for worker processes
	log      *slog.Logger
	stderr   io.Writer // the worker processes' stderr
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	only := fs.String("only", "", "comma-separated scenario numbers to run (default: all seven)")
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
	env, err := devenv.Start(ctx, devenv.Options{Postgres: true, Redis: true, Kafka: true})
	if err != nil {
		return err
	}
	defer env.Close()

	schema := fmt.Sprintf("jobfence_demo_%d", time.Now().UnixNano())
	admin, err := pgx.Connect(ctx, env.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return fmt.Errorf("create schema %s: %w", schema, err)
	}
	defer admin.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	d := &demo{
		url:      pgtest.WithSearchPath(env.DatabaseURL, schema),
		redisURL: env.RedisURL,
		brokers:  env.KafkaBrokers,
		self:     self,
		stderr:   stderr,
		log:      slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	}
	if err := migrations.Up(ctx, d.url); err != nil {
		return err
	}
	if d.pool, err = pgxpool.New(ctx, d.url); err != nil {
		return err
	}
	defer d.pool.Close()
	fmt.Fprintf(stdout, "jobfence demo: PostgreSQL schema %s, Redis %s, Kafka %s\n\n", schema, env.RedisURL, strings.Join(env.KafkaBrokers, ","))

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
		o, err := sc.run(ctx, d, p)
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

// waitUntil polls cond every 50ms until it holds, ctx ends or d passes.
func waitUntil(ctx context.Context, d time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(d)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", d, what)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// newDemoPool opens a pool of its own on the demo's schema, as another
// instance of the service would have.
func newDemoPool(ctx context.Context, d *demo, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(d.url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	return pgxpool.NewWithConfig(ctx, cfg)
}
