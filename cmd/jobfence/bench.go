package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/internal/devenv"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/migrations"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// benchArgs is the no-op job the benchmark runs.
type benchArgs struct {
	N int `json:"n"`
}

func (benchArgs) Kind() string { return "bench" }

type benchConfig struct {
	jobs        int
	duration    time.Duration
	concurrency int
	batch       int
	backlog     int
	instances   int
	conns       int
	execMode    string
	holdHorizon bool
	fetchers    int
	fetchLimit  int
	completers  int
	otel        bool
	otelSample  float64
}

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	databaseURL := databaseURLFlag(fs)
	mode := fs.String("mode", "both", "burndown, continuous or both")
	var cfg benchConfig
	fs.IntVar(&cfg.jobs, "jobs", 1_000_000, "burn-down: jobs inserted before working")
	fs.DurationVar(&cfg.duration, "duration", 30*time.Second, "continuous: how long to insert while working")
	fs.IntVar(&cfg.concurrency, "concurrency", 2000, "jobs run at once per instance (River's bench uses 2,000)")
	fs.IntVar(&cfg.batch, "batch", 5000, "jobs per insert batch (COPY)")
	fs.IntVar(&cfg.backlog, "backlog", 75_000, "continuous: available jobs the inserter keeps ahead of the workers")
	fs.IntVar(&cfg.instances, "instances", 0, "worker processes, each with a pool of its own (0: one worker in this process, which also measures enqueue-to-start latency)")
	fs.IntVar(&cfg.conns, "conns", benchWorkerConns, "each worker's pool size")
	pgbouncer := fs.Bool("pgbouncer", false, "workers connect through PgBouncer in transaction mode, poll-only (needs --instances; on the throwaway PostgreSQL)")
	fs.StringVar(&cfg.execMode, "exec-mode", "", "pgx default_query_exec_mode of the workers' connections (default: pgx's own directly, cache_describe through PgBouncer)")
	fs.BoolVar(&cfg.holdHorizon, "hold-horizon", false, "hold a REPEATABLE READ snapshot open for the whole run and report the jobs table's dead tuples")
	poolSize := fs.Int("pool-size", 20, "with --pgbouncer: PgBouncer's server connections")
	fs.IntVar(&cfg.fetchers, "fetchers", 0, "claim loops per queue (0: the worker's default)")
	fs.IntVar(&cfg.fetchLimit, "fetch-limit", 0, "jobs per claim (0: the worker's default)")
	fs.IntVar(&cfg.completers, "completers", 0, "outcome batches in flight (0: the worker's default)")
	fs.BoolVar(&cfg.otel, "otel", false, "attach telemetry with the OpenTelemetry SDK and exporters that drop everything, to measure its cost")
	fs.Float64Var(&cfg.otelSample, "otel-sample", 1, "with --otel: the fraction of traces sampled (ParentBased(TraceIDRatioBased))")
	runs := fs.Int("runs", 1, "runs of each mode; the median is reported")
	cpuProfile := fs.String("cpuprofile", "", "write a Go CPU profile of the runs to this file")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: jobfence bench [flags]   (without --database-url or $DATABASE_URL, on a throwaway PostgreSQL)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if cfg.otelSample < 0 || cfg.otelSample > 1 {
		return fmt.Errorf("--otel-sample %v: want a fraction from 0 to 1", cfg.otelSample)
	}
	if *mode != "burndown" && *mode != "continuous" && *mode != "both" {
		return fmt.Errorf("unknown --mode %q: want burndown, continuous or both", *mode)
	}
	if *pgbouncer && cfg.instances < 1 {
		return errors.New("--pgbouncer needs --instances N (N worker processes through PgBouncer)")
	}
	if cfg.instances < 0 || cfg.conns < 1 || *poolSize < 1 {
		return fmt.Errorf("--instances %d, --conns %d, --pool-size %d: want instances ≥ 0, conns and pool size ≥ 1", cfg.instances, cfg.conns, *poolSize)
	}
	if cfg.holdHorizon && cfg.instances > 0 {
		return errors.New("--hold-horizon runs one worker in this process: leave out --instances")
	}
	dbURL := databaseURL()
	if *pgbouncer && dbURL != "" {
		return errPgBouncerNeedsThrowaway
	}
	fleet := fleetSetup{bouncer: *pgbouncer, poolSize: *poolSize, stderr: stderr}
	if cfg.instances > 0 {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("bench: find this executable to run worker processes: %w", err)
		}
		fleet.self = self
	}
	if dbURL == "" {
		pg, err := devenv.StartPostgres(ctx)
		if err != nil {
			return err
		}
		defer pg.Stop()
		dbURL = pg.URL
		fmt.Fprintf(stdout, "bench: using a throwaway PostgreSQL (fsync off) on 127.0.0.1:%d\n", pg.Port)
	} else {
		pgCfg, err := pgconn.ParseConfig(dbURL)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "bench: using your PostgreSQL at %s, in a new schema per run, dropped afterwards\n", address(pgCfg))
	}
	modes := []string{*mode}
	if *mode == "both" {
		modes = []string{"burndown", "continuous"}
	}
	fleet.baseURL = dbURL
	for _, m := range modes {
		var rates []float64
		for r := range *runs {
			var res fmt.Stringer
			var rate float64
			if cfg.instances > 0 {
				fr, err := fleetOnce(ctx, fleet, m, cfg)
				if err != nil {
					return fmt.Errorf("%s run %d: %w", m, r+1, err)
				}
				res, rate = fr, fr.rate
			} else {
				br, err := benchOnce(ctx, dbURL, m, cfg)
				if err != nil {
					return fmt.Errorf("%s run %d: %w", m, r+1, err)
				}
				res, rate = br, br.rate
			}
			rates = append(rates, rate)
			fmt.Fprintf(stdout, "%-10s run %d: %s\n", m, r+1, res)
		}
		slices.Sort(rates)
		fmt.Fprintf(stdout, "%-10s median of %d: %.0f jobs/s\n", m, len(rates), rates[len(rates)/2])
	}
	return nil
}

type benchResult struct {
	jobs          int64
	elapsed       time.Duration
	rate          float64
	p50, p99      time.Duration
	stale, errors int64
	// cpu is the CPU time this process (the workers, not PostgreSQL)
	// spent during the timed window: less sensitive than the rate to other
	// load on the machine.
	cpu time.Duration
	// deadTuples is the jobs table's dead tuples at the end of an
	// in-process run; horizonHeld says whether a snapshot held the MVCC
	// horizon meanwhile (--hold-horizon).
	deadTuples  int64
	horizonHeld bool
}

func (r benchResult) String() string {
	s := fmt.Sprintf("%d jobs in %.2fs = %.0f jobs/s (every completion fenced; stale %d, errors %d)",
		r.jobs, r.elapsed.Seconds(), r.rate, r.stale, r.errors)
	if r.cpu > 0 && r.jobs > 0 {
		s += fmt.Sprintf("; worker CPU %.1f µs/job", float64(r.cpu.Microseconds())/float64(r.jobs))
	}
	if r.horizonHeld {
		s += fmt.Sprintf("; jobs table's dead tuples at the end %d, the MVCC horizon held by a REPEATABLE READ snapshot", r.deadTuples)
	} else if r.deadTuples > 0 {
		s += fmt.Sprintf("; jobs table's dead tuples at the end %d", r.deadTuples)
	}
	if r.p50 > 0 {
		s += fmt.Sprintf("; enqueue-to-start p50 %s p99 %s", r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond))
	}
	return s
}

// benchOnce runs one mode in a fresh schema, after a checkpoint, as River's
// bench truncates and checkpoints before each run.
func benchOnce(ctx context.Context, baseURL, mode string, cfg benchConfig) (benchResult, error) {
	schema := fmt.Sprintf("jobfence_bench_%d", time.Now().UnixNano())
	admin, err := pgx.Connect(ctx, baseURL)
	if err != nil {
		return benchResult{}, err
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return benchResult{}, err
	}
	defer admin.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	url := pgtest.WithSearchPath(baseURL, schema)
	if err := migrations.Up(ctx, url); err != nil {
		return benchResult{}, err
	}
	if url, err = withExecMode(url, cfg.execMode); err != nil {
		return benchResult{}, err
	}
	pool, err := newBenchPool(ctx, url, 10)
	if err != nil {
		return benchResult{}, err
	}
	defer pool.Close()
	var tel *benchTelemetry
	if cfg.otel {
		tel = newBenchTelemetry(cfg.otelSample)
		defer tel.shutdown(context.Background())
	}
	var clientCfg pgqueue.Config
	if err := tel.attach(&clientCfg, nil); err != nil {
		return benchResult{}, err
	}
	client := pgqueue.New(pool, clientCfg)

	if mode == "burndown" {
		if err := insertJobs(ctx, client, cfg.jobs, cfg.batch); err != nil {
			return benchResult{}, err
		}
	}
	if _, err := admin.Exec(ctx, "CHECKPOINT"); err != nil {
		return benchResult{}, err
	}

	var lat latencies
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[benchArgs]) error {
		if mode == "continuous" {
			lat.add(time.Since(job.CreatedAt))
		}
		return nil
	})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := newBenchPool(ctx, url, int32(cfg.conns))
	if err != nil {
		return benchResult{}, err
	}
	defer p.Close()
	wcfg := benchWorkerConfig("bench", cfg, quiet)
	if err := tel.attach(nil, &wcfg); err != nil {
		return benchResult{}, err
	}
	w, err := worker.New(pgqueue.New(p, pgqueue.Config{Logger: quiet}), reg, wcfg)
	if err != nil {
		return benchResult{}, err
	}
	completed := func() (n, stale, errs int64) {
		s := w.Stats()
		return s.Completed, s.Stale, s.FetchErrors + s.FinishErrors
	}
	var release func()
	if cfg.holdHorizon {
		if release, err = holdHorizon(ctx, url); err != nil {
			return benchResult{}, err
		}
	}
	start, cpu0 := time.Now(), processCPU()
	if err := w.Start(ctx); err != nil {
		return benchResult{}, err
	}
	res, err := runMode(ctx, mode, cfg, client, start, cpu0, completed, &lat)
	if err != nil {
		return benchResult{}, err
	}
	// Read before the horizon is released, and before the worker's stop.
	if res.deadTuples, err = deadTuples(ctx, admin, schema); err != nil {
		return benchResult{}, err
	}
	res.horizonHeld = release != nil
	if release != nil {
		release()
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w.Stop(stopCtx)
	res.settle(mode, completed)
	return res, nil
}

// settle fills in what the workers' final counters say, once they have
// stopped: a burn-down's jobs, the stale and error counts, and the rate.
func (r *benchResult) settle(mode string, completed func() (n, stale, errs int64)) {
	n, stale, errs := completed()
	if mode == "burndown" {
		r.jobs = n
	}
	r.stale, r.errors = stale, errs
	r.rate = float64(r.jobs) / r.elapsed.Seconds()
}

// runMode waits, in burn-down mode, until cfg.jobs jobs are completed
// (counting from start and from this process's CPU time cpu0), or in continuous mode keeps cfg.backlog jobs
// waiting for cfg.duration and counts the jobs completed after a warm-up.
// lat, when not nil, is reset at the warm-up's end.
func runMode(ctx context.Context, mode string, cfg benchConfig, producer *pgqueue.Client, start time.Time, cpu0 time.Duration,
	completed func() (n, stale, errs int64), lat *latencies) (benchResult, error) {
	var res benchResult
	switch mode {
	case "burndown":
		for {
			n, _, _ := completed()
			if n >= int64(cfg.jobs) {
				break
			}
			if ctx.Err() != nil {
				return benchResult{}, ctx.Err()
			}
			time.Sleep(5 * time.Millisecond)
		}
		res.elapsed, res.cpu = time.Since(start), processCPU()-cpu0
	case "continuous":
		runCtx, cancel := context.WithTimeout(ctx, cfg.duration)
		defer cancel()
		var inserted atomic.Int64
		var insertErr error
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			insertErr = keepBacklog(runCtx, producer, cfg, &inserted, completed)
		}()
		// Measure after a warm-up so the backlog is established.
		warm := min(cfg.duration/5, 5*time.Second)
		time.Sleep(warm)
		if err := analyzeJobs(ctx, producer); err != nil {
			return benchResult{}, err
		}
		n0, _, _ := completed()
		if lat != nil {
			lat.reset()
		}
		t0, c0 := time.Now(), processCPU()
		<-runCtx.Done()
		cancel()
		n1, _, _ := completed()
		res.elapsed, res.cpu = time.Since(t0), processCPU()-c0
		wg.Wait()
		if insertErr != nil && !errors.Is(insertErr, context.DeadlineExceeded) && !errors.Is(insertErr, context.Canceled) {
			return benchResult{}, insertErr
		}
		if ctx.Err() != nil {
			return benchResult{}, ctx.Err()
		}
		res.jobs = n1 - n0
		if lat != nil {
			res.p50, res.p99 = lat.percentiles()
		}
	}
	return res, nil
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchWorkerConns is each bench worker's pool size by default.
const benchWorkerConns = 12

func newBenchPool(ctx context.Context, url string, conns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = conns
	return pgxpool.NewWithConfig(ctx, cfg)
}

func insertJobs(ctx context.Context, c *pgqueue.Client, n, batch int) error {
	ps := make([]queue.EnqueueParams, 0, batch)
	for i := 0; i < n; {
		ps = ps[:0]
		for ; len(ps) < batch && i < n; i++ {
			ps = append(ps, queue.EnqueueParams{Kind: "bench", Args: []byte(`{"n":1}`)})
		}
		if _, err := c.EnqueueMany(ctx, ps); err != nil {
			return err
		}
	}
	return analyzeJobs(ctx, c)
}

// analyzeJobs refreshes the jobs table's statistics, as autovacuum would
// within a minute of a bulk insert. A run's table is new, and analyzed
// empty: with that, an unnamed statement's custom plan (the exec mode
// behind PgBouncer) claims by sorting every waiting job (a bitmap scan
// and a sort) instead of reading the claim index in order.
func analyzeJobs(ctx context.Context, c *pgqueue.Client) error {
	if _, err := c.Pool().Exec(ctx, "ANALYZE jobfence_jobs"); err != nil {
		return fmt.Errorf("bench: analyze: %w", err)
	}
	return nil
}

// keepBacklog inserts batches whenever fewer than cfg.backlog jobs wait.
func keepBacklog(ctx context.Context, c *pgqueue.Client, cfg benchConfig, inserted *atomic.Int64, completed func() (int64, int64, int64)) error {
	ps := make([]queue.EnqueueParams, cfg.batch)
	for i := range ps {
		ps[i] = queue.EnqueueParams{Kind: "bench", Args: []byte(`{"n":1}`)}
	}
	for ctx.Err() == nil {
		done, _, _ := completed()
		if inserted.Load()-done >= int64(cfg.backlog) {
			time.Sleep(2 * time.Millisecond)
			continue
		}
		n, err := c.EnqueueMany(ctx, ps)
		if err != nil {
			return err
		}
		inserted.Add(n)
	}
	return ctx.Err()
}

// latencies samples enqueue-to-start times.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *latencies) reset() {
	l.mu.Lock()
	l.d = l.d[:0]
	l.mu.Unlock()
}

func (l *latencies) percentiles() (p50, p99 time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0, 0
	}
	slices.Sort(l.d)
	return l.d[len(l.d)/2], l.d[len(l.d)*99/100]
}
