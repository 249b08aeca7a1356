package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobfence/jobfence/internal/devenv"
)

// benchArgs is the no-op job the benchmark runs. At is when a latency
// run's producer began to insert it (Unix nanoseconds, this process's
// clock); zero elsewhere.
type benchArgs struct {
	N  int   `json:"n"`
	At int64 `json:"at,omitempty"`
	// P is the job's partition (--limit-partitions).
	P int `json:"p,omitempty"`
}

func (benchArgs) Kind() string { return "bench" }

type benchConfig struct {
	jobs        int
	duration    time.Duration
	concurrency int
	batch       int
	backlog     int
	// inserters is how many insert streams keep the backlog
	// (continuous mode).
	inserters   int
	instances   int
	conns       int
	execMode    string
	holdHorizon bool
	fetchers    int
	fetchLimit  int
	completers  int
	otel        bool
	otelSample  float64
	// noSeries turns off the per-minute series (pgqueue.Config.NoSeries),
	// to measure what they cost.
	noSeries   bool
	statements bool
	// latency mode
	rate      float64
	producers int
	// floor pairs each latency run with a run of a minimal queue
	// (floorOnce).
	floor bool
	// claim mode
	claim claimConfig
	// heartbeat mode
	heartbeat heartbeatConfig
	// fillfactor, when not zero, is set on the jobs table before a run,
	// with tableOptions ("name=value").
	fillfactor   int
	tableOptions []string
	// soak mode
	soak soakConfig
	// fanout is the width of --mode fanout's workflow.
	fanout int
	// limits: flow control on burn-down and continuous runs
	limits limitBench
}

// benchFlags are the flags of jobfence bench that are not a run's
// configuration: where it runs and how often.
type benchFlags struct {
	mode          string
	runs          int
	unsafeFast    bool
	sharedBuffers string
	pgbouncer     bool
	poolSize      int
	cpuProfile    string
	versusOne     bool
	dbURL         string
	// set holds the names of the flags given on the command line.
	set map[string]bool
}

// benchModes are the modes --mode takes.
const benchModes = "burndown, continuous, both, latency, claim, heartbeat, soak or fanout"

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	databaseURL := databaseURLFlag(fs)
	var bf benchFlags
	var cfg benchConfig
	fs.StringVar(&bf.mode, "mode", "both", benchModes)
	fs.IntVar(&cfg.jobs, "jobs", 1_000_000, "burn-down: jobs inserted before working")
	fs.DurationVar(&cfg.duration, "duration", 30*time.Second, "continuous, latency and soak: how long to insert while working (soak: 60m unless given)")
	fs.IntVar(&cfg.concurrency, "concurrency", 2000, "jobs run at once per instance (River's bench uses 2,000)")
	fs.IntVar(&cfg.batch, "batch", 5000, "jobs per insert batch (COPY)")
	fs.IntVar(&cfg.backlog, "backlog", 75_000, "continuous: available jobs the inserters keep ahead of the workers (inserted before the workers start, as River's bench does)")
	fs.IntVar(&cfg.inserters, "inserters", 1, "continuous: insert streams that keep the backlog, each inserting --batch jobs at a time (one cannot keep up with a fleet's 20 instances: see the run's waiting jobs)")
	fs.IntVar(&cfg.instances, "instances", 0, "worker processes, each with a pool of its own (0: one worker in this process)")
	fs.IntVar(&cfg.conns, "conns", benchWorkerConns, "each worker's pool size")
	fs.BoolVar(&bf.pgbouncer, "pgbouncer", false, "workers connect through PgBouncer in transaction mode, poll-only (needs --instances; on the throwaway PostgreSQL)")
	fs.StringVar(&cfg.execMode, "exec-mode", "", "pgx default_query_exec_mode of the workers' connections (default: pgx's own directly, cache_describe through PgBouncer)")
	fs.BoolVar(&cfg.holdHorizon, "hold-horizon", false, "hold a REPEATABLE READ snapshot open for the whole run and report the jobs table's dead tuples")
	fs.IntVar(&bf.poolSize, "pool-size", 20, "with --pgbouncer: PgBouncer's server connections")
	fs.BoolVar(&bf.versusOne, "versus-one", false, "with --instances: pair each run with a run of one worker in this process, connected directly (before it, then after it, in turn), and report each pair's ratio")
	fs.IntVar(&cfg.fetchers, "fetchers", 0, "claim loops per queue (0: the worker's default)")
	fs.IntVar(&cfg.fetchLimit, "fetch-limit", 0, "jobs per claim (0: the worker's default, 1000)")
	fs.IntVar(&cfg.completers, "completers", 0, "outcome batches in flight (0: the worker's default)")
	fs.BoolVar(&cfg.noSeries, "no-series", false, "turn off the per-minute series of the dashboard's charts (pgqueue.Config.NoSeries), to measure what they cost (one worker in this process)")
	fs.BoolVar(&cfg.otel, "otel", false, "attach telemetry with the OpenTelemetry SDK and exporters that drop everything, to measure its cost")
	fs.Float64Var(&cfg.otelSample, "otel-sample", 1, "with --otel: the fraction of traces sampled (ParentBased(TraceIDRatioBased))")
	fs.BoolVar(&cfg.statements, "statements", false, "print the five statements that took the most server time in each run, with their rows, buffers and WAL records (needs pg_stat_statements)")
	fs.Float64Var(&cfg.rate, "rate", 0, "latency: jobs offered per second, each inserted in a transaction of its own")
	fs.BoolVar(&cfg.floor, "floor", false, "latency: pair each run with the same load through a minimal queue on the same server (no fence, lease, attempt count or limit), taking turns going first: what the machine allows")
	fs.IntVar(&cfg.producers, "producers", 32, "latency: producer goroutines that insert the offered jobs, as concurrent web requests would")
	fs.IntVar(&cfg.claim.rows, "rows", 10_000_000, "claim: rows in the jobs table")
	fs.IntVar(&cfg.claim.future, "future", 1_000_000, "claim: of them, retries scheduled in the future")
	fs.IntVar(&cfg.claim.ready, "ready", 5, "claim: of them, jobs ready to run")
	fs.IntVar(&cfg.claim.due, "due", 0, "claim: of them, retries whose time has come (an outage's retry storm)")
	fs.IntVar(&cfg.claim.claims, "claims", 21, "claim: claims measured; the median is reported")
	fs.BoolVar(&cfg.heartbeat.leaseIndex, "lease-index", false, "heartbeat: recreate the index on lease_expires_at that migrations before 00006 had")
	fs.DurationVar(&cfg.soak.retention, "retention", 10*time.Minute, "soak: how long finished jobs are kept before the worker prunes them (its Retention)")
	fs.DurationVar(&cfg.soak.interval, "report-interval", time.Minute, "soak: how often a line reports the rate, the jobs table's sizes, its tuples and autovacuum")
	fs.IntVar(&cfg.fanout, "tasks", 10_000, "fanout: the tasks a workflow's root fans out to, which fan in to one task")
	fs.IntVar(&cfg.fillfactor, "fillfactor", 0, "set the jobs table's fillfactor (10-100) before inserting (0: PostgreSQL's default, 100)")
	fs.Func("table-options", "storage options set on the jobs table before inserting, comma-separated name=value (e.g. autovacuum_vacuum_cost_delay=0,autovacuum_vacuum_scale_factor=0.01)", func(v string) error {
		opts, err := parseTableOptions(v)
		cfg.tableOptions = opts
		return err
	})
	cfg.limits.addFlags(fs)
	fs.IntVar(&bf.runs, "runs", 1, "runs of each mode; the median is reported")
	fs.BoolVar(&bf.unsafeFast, "unsafe-fast", false, "run the throwaway PostgreSQL with fsync, synchronous_commit and full_page_writes off: faster, not durable, not comparable")
	fs.StringVar(&bf.sharedBuffers, "shared-buffers", "2GB", "the throwaway PostgreSQL's shared_buffers")
	fs.StringVar(&bf.cpuProfile, "cpuprofile", "", "write a Go CPU profile of the runs to this file")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: jobfence bench [flags]   (without --database-url or $DATABASE_URL, on a throwaway durable PostgreSQL)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	bf.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { bf.set[f.Name] = true })
	bf.dbURL = databaseURL()
	if !bf.set["concurrency"] {
		switch bf.mode {
		case "latency":
			// Latency is measured with the worker's default concurrency,
			// as a service runs it; throughput runs keep River's 2,000.
			cfg.concurrency = 100
		case "heartbeat":
			cfg.concurrency = 500
		}
	}
	if bf.mode == "soak" && !bf.set["duration"] {
		// The target is an hour at full speed.
		cfg.duration = time.Hour
	}
	if err := bf.validate(cfg); err != nil {
		return err
	}
	if bf.cpuProfile != "" {
		f, err := os.Create(bf.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	// What the bench's own producers log goes to the command's stderr.
	log := slog.New(slog.NewTextHandler(stderr, nil))
	fleet := fleetSetup{bouncer: bf.pgbouncer, poolSize: bf.poolSize, stderr: stderr, log: log}
	if cfg.instances > 0 {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("bench: find this executable to run worker processes: %w", err)
		}
		fleet.self = self
	}
	dbURL := bf.dbURL
	if dbURL == "" {
		pg, err := devenv.StartPostgresWith(ctx, devenv.PostgresOptions{
			Durable: !bf.unsafeFast, SharedBuffers: bf.sharedBuffers, StatStatements: true,
		})
		if err != nil {
			return err
		}
		defer pg.Stop()
		dbURL = pg.URL
		// Only on its own server can the bench read the log, which says
		// how long each autovacuum pass took.
		cfg.soak.serverLog = pg.LogFile()
		fmt.Fprintf(stdout, "bench: a throwaway PostgreSQL on 127.0.0.1:%d\n", pg.Port)
		if pg.StatStatements {
			if err := createStatStatements(ctx, dbURL); err != nil {
				return err
			}
		}
	} else {
		pgCfg, err := pgconn.ParseConfig(dbURL)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "bench: your PostgreSQL at %s, in a new schema per run, dropped afterwards\n", address(pgCfg))
	}
	settings, err := printSettings(ctx, dbURL, stdout)
	if err != nil {
		return err
	}
	if bf.unsafeFast {
		fmt.Fprintln(stdout, "bench: --unsafe-fast: durability is off; these figures overstate what a production server does")
	}
	fleet.baseURL = dbURL
	switch bf.mode {
	case "claim":
		return runClaimBench(ctx, dbURL, cfg, stdout)
	case "latency":
		return runLatencyBench(ctx, dbURL, cfg, bf.runs, settings, stdout)
	case "heartbeat":
		return runHeartbeatBench(ctx, dbURL, cfg, stdout)
	case "soak":
		return runSoakBench(ctx, dbURL, cfg, settings, log, stdout)
	case "fanout":
		return runFanoutBench(ctx, dbURL, cfg, bf.runs, stdout)
	}
	modes := []string{bf.mode}
	if bf.mode == "both" {
		modes = []string{"burndown", "continuous"}
	}
	// --versus-one pairs each fleet run with a run of one instance
	// (validate refuses it without --instances); --versus-unlimited a
	// limited run with an unlimited one.
	versus := bf.versusOne && cfg.instances > 0 || cfg.limits.versus
	for _, m := range modes {
		var results, ones []benchResult
		for r := range bf.runs {
			// A pair's runs take turns going first: the server gets
			// faster over its first runs, and going second would favour
			// one side. (Not because it creates its WAL segments then:
			// with them made beforehand, it still did.)
			oneFirst := r%2 == 0
			one := func() error {
				single, what := cfg, "one instance connected directly"
				single.instances = 0
				if cfg.limits.versus {
					single, what = cfg.limits.unlimitedConfig(cfg)
				}
				b, err := benchOnce(ctx, dbURL, m, single, settings, log)
				if err != nil {
					return fmt.Errorf("%s run %d, %s: %w", m, r+1, what, err)
				}
				ones = append(ones, b)
				fmt.Fprintf(stdout, "%-10s run %d, %s: %s\n", m, r+1, what, b)
				return nil
			}
			if versus && oneFirst {
				if err := one(); err != nil {
					return err
				}
			}
			var res fmt.Stringer
			var br benchResult
			if cfg.instances > 0 {
				fr, err := fleetOnce(ctx, fleet, m, cfg, settings)
				if err != nil {
					return fmt.Errorf("%s run %d: %w", m, r+1, err)
				}
				res, br = fr, fr.benchResult
			} else {
				b, err := benchOnce(ctx, dbURL, m, cfg, settings, log)
				if err != nil {
					return fmt.Errorf("%s run %d: %w", m, r+1, err)
				}
				res, br = b, b
			}
			results = append(results, br)
			fmt.Fprintf(stdout, "%-10s run %d: %s\n", m, r+1, res)
			if versus && !oneFirst {
				if err := one(); err != nil {
					return err
				}
			}
		}
		fmt.Fprintf(stdout, "%-10s %s\n", m, medianLine(m, results))
		if cfg.limits.versus {
			fmt.Fprintf(stdout, "%-10s %s\n", m, limitsVersusLine(cfg.limits, ones, results))
		} else if versus {
			fmt.Fprintf(stdout, "%-10s %s\n", m, versusLine(cfg.instances, ones, results))
		}
	}
	return nil
}

// validate refuses flags the bench cannot honour, saying why.
func (bf benchFlags) validate(cfg benchConfig) error {
	switch bf.mode {
	case "burndown", "continuous", "both", "latency", "claim", "heartbeat", "soak", "fanout":
	default:
		return fmt.Errorf("unknown --mode %q: want %s", bf.mode, benchModes)
	}
	if bf.runs < 1 {
		return fmt.Errorf("--runs %d: want at least 1", bf.runs)
	}
	if bf.mode == "fanout" && cfg.instances > 0 {
		return errors.New("--mode fanout runs one worker in this process, whose completions it counts: leave out --instances")
	}
	if cfg.noSeries && cfg.instances > 0 {
		return errors.New("--no-series turns the series off in this process's worker: leave out --instances")
	}
	if bf.mode != "fanout" && bf.set["tasks"] {
		return fmt.Errorf("--tasks is for --mode fanout, not --mode %s", bf.mode)
	}
	if cfg.fanout < 1 {
		return fmt.Errorf("--tasks %d: want at least 1", cfg.fanout)
	}
	if bf.mode == "soak" && bf.set["runs"] {
		return errors.New("--mode soak runs once, for --duration: its lines show how the rate holds over time")
	}
	if (bf.mode == "claim" || bf.mode == "heartbeat") && bf.set["runs"] {
		return fmt.Errorf("--runs repeats burn-down, continuous and latency runs; --mode %s runs once (claim mode takes the median of --claims claims): run it again for another table", bf.mode)
	}
	if bf.dbURL != "" && bf.unsafeFast {
		return errors.New("--unsafe-fast turns durability off on the bench's throwaway PostgreSQL; with --database-url or $DATABASE_URL your server's settings apply: leave it out")
	}
	if bf.dbURL != "" && bf.set["shared-buffers"] {
		return errors.New("--shared-buffers sets the throwaway PostgreSQL's shared_buffers; with --database-url or $DATABASE_URL your server's settings apply: leave it out")
	}
	if err := devenv.CheckMemorySetting(bf.sharedBuffers); err != nil {
		return fmt.Errorf("--shared-buffers %w", err)
	}
	if cfg.otelSample < 0 || cfg.otelSample > 1 {
		return fmt.Errorf("--otel-sample %v: want a fraction from 0 to 1", cfg.otelSample)
	}
	if bf.pgbouncer && cfg.instances < 1 {
		return errors.New("--pgbouncer needs --instances N (N worker processes through PgBouncer)")
	}
	if bf.versusOne && cfg.instances < 1 {
		return errors.New("--versus-one compares a fleet with one instance: it needs --instances N")
	}
	if cfg.instances < 0 || cfg.conns < 1 || bf.poolSize < 1 {
		return fmt.Errorf("--instances %d, --conns %d, --pool-size %d: want instances ≥ 0, conns and pool size ≥ 1", cfg.instances, cfg.conns, bf.poolSize)
	}
	if cfg.inserters < 1 {
		return fmt.Errorf("--inserters %d: want at least 1", cfg.inserters)
	}
	if cfg.concurrency < 1 || cfg.batch < 1 || cfg.jobs < 1 || cfg.backlog < 0 {
		return fmt.Errorf("--concurrency %d, --batch %d, --jobs %d, --backlog %d: want concurrency, batch and jobs ≥ 1, backlog ≥ 0",
			cfg.concurrency, cfg.batch, cfg.jobs, cfg.backlog)
	}
	if cfg.duration <= 0 {
		return fmt.Errorf("--duration %s: want a positive duration such as 30s", cfg.duration)
	}
	if cfg.holdHorizon && cfg.instances > 0 {
		return errors.New("--hold-horizon runs one worker in this process: leave out --instances")
	}
	if bf.pgbouncer && bf.dbURL != "" {
		return errPgBouncerNeedsThrowaway
	}
	if bf.mode == "latency" {
		if cfg.rate <= 0 {
			return fmt.Errorf("--mode latency needs --rate R, the jobs offered per second (R > 0; got %v)", cfg.rate)
		}
		if cfg.producers < 1 {
			return fmt.Errorf("--producers %d: want at least 1", cfg.producers)
		}
		if cfg.instances > 0 {
			return errors.New("--mode latency runs one worker in this process, whose clock times each job: leave out --instances")
		}
	} else if bf.set["rate"] || bf.set["producers"] || bf.set["floor"] {
		return fmt.Errorf("--rate, --producers and --floor are for --mode latency, not --mode %s", bf.mode)
	}
	if err := cfg.limits.validate(bf.mode, cfg, bf.set); err != nil {
		return err
	}
	if bf.mode == "claim" {
		if cfg.instances > 0 {
			return errors.New("--mode claim measures claims from this process: leave out --instances")
		}
		return cfg.claim.validate()
	}
	for _, name := range []string{"rows", "future", "ready", "due", "claims"} {
		if bf.set[name] {
			return fmt.Errorf("--%s is for --mode claim, not --mode %s", name, bf.mode)
		}
	}
	if f := cfg.fillfactor; f != 0 && (f < 10 || f > 100) {
		return fmt.Errorf("--fillfactor %d: want 10 to 100 (PostgreSQL's range)", f)
	}
	if bf.mode == "soak" {
		if cfg.instances > 0 {
			return errors.New("--mode soak runs one worker in this process, whose pruning it measures: leave out --instances")
		}
		if err := cfg.soak.validate(cfg.duration); err != nil {
			return err
		}
	} else if bf.set["retention"] || bf.set["report-interval"] {
		return fmt.Errorf("--retention and --report-interval are for --mode soak, not --mode %s", bf.mode)
	}
	if bf.mode == "heartbeat" {
		if cfg.instances > 0 {
			return errors.New("--mode heartbeat runs one worker in this process: leave out --instances")
		}
		return nil
	}
	if bf.set["lease-index"] {
		return fmt.Errorf("--lease-index is for --mode heartbeat, not --mode %s", bf.mode)
	}
	return nil
}

// createStatStatements creates pg_stat_statements in the throwaway
// server's database (it is preloaded there); never on a server of the
// user's.
func createStatStatements(ctx context.Context, dbURL string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return fmt.Errorf("bench: create pg_stat_statements: %w", err)
	}
	return nil
}

// printSettings prints the server's settings and the machine's load.
func printSettings(ctx context.Context, dbURL string, stdout io.Writer) (serverSettings, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return serverSettings{}, err
	}
	defer conn.Close(context.Background())
	s, err := readSettings(ctx, conn)
	if err != nil {
		return s, err
	}
	fmt.Fprintf(stdout, "bench: server %s\n", s)
	fmt.Fprintf(stdout, "bench: machine load average %s (1, 5, 15 min) before the first run\n", loadAverage())
	return s, nil
}

// storageOptions are the options set on the jobs table before a run.
func (c benchConfig) storageOptions() []string {
	opts := slices.Clone(c.tableOptions)
	if c.fillfactor != 0 {
		opts = append(opts, fmt.Sprintf("fillfactor=%d", c.fillfactor))
	}
	return opts
}

// tableOptionRE is one storage option: a parameter name and a number or
// a boolean, nothing that could end the ALTER TABLE it goes into.
var tableOptionRE = regexp.MustCompile(`^[a-z_][a-z0-9_.]*=([0-9]+(\.[0-9]+)?|on|off|true|false)$`)

// parseTableOptions splits --table-options into "name=value" options.
func parseTableOptions(v string) ([]string, error) {
	var opts []string
	for _, o := range strings.Split(v, ",") {
		o = strings.ReplaceAll(strings.TrimSpace(o), " ", "")
		if !tableOptionRE.MatchString(o) {
			return nil, fmt.Errorf("%q: want name=value, the value a number or on/off (a PostgreSQL storage parameter, e.g. autovacuum_vacuum_cost_delay=0)", o)
		}
		opts = append(opts, o)
	}
	return opts, nil
}
