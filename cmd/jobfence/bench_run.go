package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/internal/cpuclock"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// benchWarmup is how long a run works before the after-warm-up window
// opens (a continuous run shorter than 25 s warms up for a fifth of it).
const benchWarmup = 5 * time.Second

type benchResult struct {
	// jobs completed in elapsed, from the workers' start to the last
	// completion (burn-down) or to the end of --duration (continuous):
	// river bench's window, ramp-up included.
	jobs    int64
	elapsed time.Duration
	rate    float64
	// warmJobs completed in warmElapsed, after the warm-up; zero when the
	// run ended before the warm-up did.
	warmup      time.Duration
	warmJobs    int64
	warmElapsed time.Duration
	// p50 and p99 are enqueue-to-start times of the jobs claimed after the
	// warm-up, by the database's clock (continuous mode).
	p50, p99      time.Duration
	stale, errors int64
	// cpu is the CPU time this process (the workers, not PostgreSQL)
	// spent during the run: less sensitive than the rate to other load
	// on the machine.
	cpu time.Duration
	// machine is what the whole machine's processors spent during the
	// run (PostgreSQL's and every other process's CPU too), or zero where
	// the system cannot tell: whether the run saturated them, and what a
	// job cost all of them.
	machine cpuclock.Machine
	// deadTuples is the jobs table's dead tuples at the end of an
	// in-process run; horizonHeld says whether a snapshot held the MVCC
	// horizon meanwhile (--hold-horizon).
	deadTuples  int64
	horizonHeld bool
	// cost is what the jobs cost the server: the whole burn-down, or a
	// continuous run's window after the warm-up (as many jobs inserted as
	// completed). insert is what inserting a burn-down's jobs cost.
	cost, insert cost
	// waiting is the jobs inserted and not yet completed during a
	// continuous run's window.
	waiting waiting
	// conns is the most connections the run had open at once.
	conns int
	load  string
	// statements prints the costliest statements (--statements).
	statements bool
	// soak is a soak's report (--mode soak).
	soak *soakReport
	// limits says what limited the run (--limit-concurrency,
	// --limit-partitions).
	limits string
}

func (r benchResult) warmRate() float64 {
	if r.warmElapsed <= 0 {
		return 0
	}
	return float64(r.warmJobs) / r.warmElapsed.Seconds()
}

func (r benchResult) String() string {
	s := fmt.Sprintf("%d jobs in %.2fs = %.0f jobs/s from the workers' start (river bench's window, ramp-up included)",
		r.jobs, r.elapsed.Seconds(), r.rate)
	if r.limits != "" && r.limits != "unlimited" {
		s = r.limits + ": " + s
	}
	if w := r.warmRate(); w > 0 {
		s += fmt.Sprintf("; %.0f jobs/s after a %s warm-up", w, r.warmup)
	} else {
		s += fmt.Sprintf("; ended before a %s warm-up", r.warmup)
	}
	s += fmt.Sprintf("; every completion fenced: stale %d, errors %d", r.stale, r.errors)
	if r.cpu > 0 && r.jobs > 0 {
		s += fmt.Sprintf("; worker CPU %.1f µs/job", float64(r.cpu.Microseconds())/float64(r.jobs))
	}
	if r.machine.CPUs > 0 && r.jobs > 0 {
		s += fmt.Sprintf("; machine CPU %.1f µs/job, busy %.0f %% of %d CPUs, steal %.0f %%",
			float64(r.machine.Busy.Microseconds())/float64(r.jobs), 100*r.machine.BusyShare(), r.machine.CPUs, 100*r.machine.StealShare())
	}
	s += "; load " + r.load
	s += "\n    cost: " + r.cost.String()
	if r.insert.jobs > 0 {
		s += fmt.Sprintf(" (working only; inserting them beforehand: %.4f commits/job, %.0f WAL bytes/job)",
			float64(r.insert.commits)/float64(r.insert.jobs), float64(r.insert.walBytes)/float64(r.insert.jobs))
	}
	s += fmt.Sprintf("; connections max %d", r.conns)
	if r.p50 > 0 {
		s += fmt.Sprintf("; enqueue-to-start p50 %s p99 %s", r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond))
	}
	if r.waiting.mean > 0 {
		s += fmt.Sprintf("; jobs inserted and not yet completed during the window: mean %d, min %d", r.waiting.mean, r.waiting.min)
	}
	if r.horizonHeld {
		s += fmt.Sprintf("; jobs table's dead tuples at the end %d, the MVCC horizon held by a REPEATABLE READ snapshot", r.deadTuples)
	} else if r.deadTuples > 0 {
		s += fmt.Sprintf("; jobs table's dead tuples at the end %d", r.deadTuples)
	}
	if r.statements {
		s += r.cost.topStatements(5)
	}
	return s
}

// medianLine summarises runs: the median of each figure.
func medianLine(mode string, rs []benchResult) string {
	med := func(f func(benchResult) float64) float64 { return median(figures(rs, f)) }
	perJob := func(n float64, c cost) float64 { return n / float64(max(c.jobs, 1)) }
	warm := "no run outlasted the warm-up"
	if w := med(benchResult.warmRate); w > 0 {
		warm = fmt.Sprintf("%.0f jobs/s after the warm-up", w)
	}
	s := fmt.Sprintf("median of %d: %.0f jobs/s from the workers' start, %s; %.4f commits/job, %.0f WAL bytes/job",
		len(rs), med(func(r benchResult) float64 { return r.rate }), warm,
		med(func(r benchResult) float64 { return perJob(float64(r.cost.commits), r.cost) }),
		med(func(r benchResult) float64 { return perJob(float64(r.cost.walBytes), r.cost) }))
	if mode == "continuous" {
		s += fmt.Sprintf("; enqueue-to-start p50 %s p99 %s",
			time.Duration(med(func(r benchResult) float64 { return float64(r.p50) })).Round(time.Millisecond),
			time.Duration(med(func(r benchResult) float64 { return float64(r.p99) })).Round(time.Millisecond))
	}
	return s
}

// benchOnce runs one mode in a fresh schema, after a checkpoint, as River's
// bench truncates the table before each run. Its producer logs to log.
func benchOnce(ctx context.Context, baseURL, mode string, cfg benchConfig, settings serverSettings, log *slog.Logger) (benchResult, error) {
	name := fmt.Sprintf("jobfence_bench_%d", time.Now().UnixNano())
	pr, err := newProbe(ctx, baseURL, name, settings)
	if err != nil {
		return benchResult{}, err
	}
	defer pr.close()
	url, drop, err := runSchema(ctx, pr.conn, baseURL, name, cfg.storageOptions())
	if err != nil {
		return benchResult{}, err
	}
	defer drop()
	if mode == "soak" {
		if err := prepareSoak(ctx, pr.conn, name, cfg); err != nil {
			return benchResult{}, err
		}
	}
	if url, err = withExecMode(url, cfg.execMode); err != nil {
		return benchResult{}, err
	}
	if url, err = withApplicationName(url, name); err != nil {
		return benchResult{}, err
	}
	var tel *benchTelemetry
	if cfg.otel {
		tel = newBenchTelemetry(cfg.otelSample)
		defer tel.shutdown(context.Background())
	}
	clientCfg := pgqueue.Config{Logger: log, NoSeries: cfg.noSeries}
	if err := tel.attach(&clientCfg, nil); err != nil {
		return benchResult{}, err
	}
	pool, err := newBenchPool(ctx, url, int32(max(10, cfg.inserters+1)))
	if err != nil {
		return benchResult{}, err
	}
	defer pool.Close()
	client := pgqueue.New(pool, clientCfg)
	res := benchResult{statements: cfg.statements, limits: cfg.limits.describe()}
	if err := cfg.limits.apply(ctx, client); err != nil {
		return benchResult{}, err
	}
	prefilled, err := prepareRun(ctx, mode, cfg, client, pr, &res)
	if err != nil {
		return benchResult{}, err
	}

	reg := worker.NewRegistry()
	cfg.limits.register(reg)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := newBenchPool(ctx, url, int32(cfg.conns))
	if err != nil {
		return benchResult{}, err
	}
	defer p.Close()
	wcfg := benchWorkerConfig("bench", cfg, quiet)
	if mode == "soak" {
		cfg.soak.configure(&wcfg)
	}
	if err := tel.attach(nil, &wcfg); err != nil {
		return benchResult{}, err
	}
	w, err := worker.New(pgqueue.New(p, pgqueue.Config{Logger: quiet, NoSeries: cfg.noSeries}), reg, wcfg)
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
	c0, err := pr.counters(ctx)
	if err != nil {
		return benchResult{}, err
	}
	var inserted atomic.Int64
	inserted.Store(prefilled)
	var soak *soakReporter
	if mode == "soak" {
		if soak, err = newSoakReporter(ctx, baseURL, name, cfg); err != nil {
			return benchResult{}, err
		}
		defer soak.stop()
	}
	samples := sampleActivity(ctx, baseURL, name)
	start, cpu0, machine := time.Now(), cpuclock.Process(), readMachine()
	if soak != nil {
		if err := soak.start(ctx, start, w.Stats, &inserted); err != nil {
			return benchResult{}, err
		}
	}
	if err := w.Start(ctx); err != nil {
		return benchResult{}, err
	}
	if err := runMode(ctx, mode, cfg, client, &inserted, start, completed, pr, &res); err != nil {
		return benchResult{}, err
	}
	if soak != nil {
		// Its last line is read at the end of --duration, with the
		// worker still running.
		if err := soak.wait(); err != nil {
			return benchResult{}, err
		}
	}
	res.cpu = cpuclock.Process() - cpu0
	res.machine = machine()
	// Read before the horizon is released, and before the worker's stop.
	if res.deadTuples, err = deadTuples(ctx, pr.conn, name); err != nil {
		return benchResult{}, err
	}
	res.horizonHeld = release != nil
	if release != nil {
		release()
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w.Stop(stopCtx)
	p.Close()
	pool.Close()
	res.conns = samples().maxConns
	if err := res.settle(ctx, mode, completed, pr, c0, name); err != nil {
		return benchResult{}, err
	}
	if soak != nil {
		rows, err := countJobs(ctx, pr.conn, name)
		if err != nil {
			return benchResult{}, err
		}
		res.soak = soak.report(rows, inserted.Load(), w.Stats().Pruned)
	}
	return res, nil
}

// prepareRun fills the table before the workers start: a burn-down's jobs
// (whose insert it measures, closing the producer's connections so that
// their statistics are flushed), or a continuous run's backlog, as River's
// bench inserts its first batches before it starts its client. Then it
// checkpoints. It returns the jobs inserted.
func prepareRun(ctx context.Context, mode string, cfg benchConfig, client *pgqueue.Client, pr *probe, res *benchResult) (int64, error) {
	n := cfg.backlog
	if mode == "burndown" {
		n = cfg.jobs
	}
	before, err := pr.counters(ctx)
	if err != nil {
		return 0, err
	}
	if err := insertJobs(ctx, client, n, cfg.batch, cfg.limits.args); err != nil {
		return 0, err
	}
	if mode == "burndown" {
		client.Pool().Reset()
		if err := pr.waitGone(ctx); err != nil {
			return 0, err
		}
		after, err := pr.counters(ctx)
		if err != nil {
			return 0, err
		}
		res.insert = costBetween(before, after, int64(n))
	}
	if _, err := pr.conn.Exec(ctx, "CHECKPOINT"); err != nil {
		return 0, err
	}
	return int64(n), nil
}

// settle fills in what the final counters say once the workers have
// stopped and their connections closed: a burn-down's jobs, rate and cost,
// and the stale and error counts. c0 was read before the workers started.
func (r *benchResult) settle(ctx context.Context, mode string, completed func() (n, stale, errs int64), pr *probe, c0 dbCounters, schema string) error {
	n, stale, errs := completed()
	r.stale, r.errors = stale, errs
	r.load = loadAverage()
	if mode != "burndown" {
		return nil
	}
	r.jobs = n
	r.rate = float64(r.jobs) / r.elapsed.Seconds()
	if err := pr.waitGone(ctx); err != nil {
		return err
	}
	c1, err := pr.counters(ctx)
	if err != nil {
		return err
	}
	r.cost = costBetween(c0, c1, n)
	return nil
}

// runMode waits, in burn-down mode, until cfg.jobs jobs are completed
// (counting from start), or in continuous and soak mode keeps cfg.backlog
// jobs waiting for cfg.duration, counting them in inserted (which holds
// those inserted before start). Both note the jobs completed after the
// warm-up; continuous mode reads the server's counters over that window.
func runMode(ctx context.Context, mode string, cfg benchConfig, producer *pgqueue.Client, inserted *atomic.Int64, start time.Time,
	completed func() (n, stale, errs int64), pr *probe, res *benchResult) error {
	switch mode {
	case "burndown":
		res.warmup = benchWarmup
		var n0 int64
		var t0 time.Time
		for {
			n, _, _ := completed()
			if n >= int64(cfg.jobs) {
				break
			}
			if t0.IsZero() && time.Since(start) >= res.warmup {
				n0, t0 = n, time.Now()
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			time.Sleep(5 * time.Millisecond)
		}
		res.elapsed = time.Since(start)
		if !t0.IsZero() {
			res.warmJobs, res.warmElapsed = int64(cfg.jobs)-n0, time.Since(t0)
		}
	case "continuous", "soak":
		res.warmup = min(cfg.duration/5, benchWarmup)
		runCtx, cancel := context.WithDeadline(ctx, start.Add(cfg.duration))
		defer cancel()
		insertErrs := make(chan error, cfg.inserters)
		var wg sync.WaitGroup
		for range cfg.inserters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				insertErrs <- keepBacklog(runCtx, producer, cfg, inserted, completed)
			}()
		}
		time.Sleep(time.Until(start.Add(res.warmup)))
		if err := analyzeJobs(ctx, producer); err != nil {
			return err
		}
		c0, err := pr.counters(ctx)
		if err != nil {
			return err
		}
		since, err := pr.now(ctx)
		if err != nil {
			return err
		}
		n0, _, _ := completed()
		t0 := time.Now()
		res.waiting = sampleWaiting(runCtx, inserted, completed)
		n1, _, _ := completed()
		res.elapsed, res.warmElapsed = time.Since(start), time.Since(t0)
		c1, err := pr.counters(ctx)
		if err != nil {
			return err
		}
		wg.Wait()
		close(insertErrs)
		for err := range insertErrs {
			if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				return err
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		res.jobs, res.warmJobs = n1, n1-n0
		res.rate = float64(n1) / res.elapsed.Seconds()
		res.cost = costBetween(c0, c1, n1-n0)
		if mode == "soak" {
			// Pruning has deleted most of the jobs whose times it
			// would read, and the scan of a long run's table is slow.
			return nil
		}
		if res.p50, res.p99, err = pr.startLatency(ctx, pr.name, since); err != nil {
			return err
		}
	}
	return nil
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

// insertJobs inserts n jobs in batches, the i-th with args(i).
func insertJobs(ctx context.Context, c *pgqueue.Client, n, batch int, args func(i int) []byte) error {
	ps := make([]queue.EnqueueParams, 0, batch)
	for i := 0; i < n; {
		ps = ps[:0]
		for ; len(ps) < batch && i < n; i++ {
			ps = append(ps, queue.EnqueueParams{Kind: "bench", Args: args(i)})
		}
		if _, err := c.EnqueueMany(ctx, ps); err != nil {
			return err
		}
	}
	return analyzeJobs(ctx, c)
}

// analyzeJobs refreshes the jobs table's statistics, as autovacuum would
// within a minute of a bulk insert, so that a run measures the statements'
// plans on a table of its size rather than the plans of a new, never
// analyzed one. The claim's plan is the same either way (TestClaimPlan);
// the latency mode's completions were not (see its warm-up).
func analyzeJobs(ctx context.Context, c *pgqueue.Client) error {
	if _, err := c.Pool().Exec(ctx, "ANALYZE jobfence_jobs"); err != nil {
		return fmt.Errorf("bench: analyze: %w", err)
	}
	return nil
}

// waiting is what sampling the jobs inserted and not yet completed found
// during a continuous run's window: whether the inserters kept the
// backlog. It counts jobs claimed and still running too.
type waiting struct {
	mean, min int64
}

// sampleWaiting samples, every 100 ms until ctx ends, the jobs inserted
// and not yet completed.
func sampleWaiting(ctx context.Context, inserted *atomic.Int64, completed func() (int64, int64, int64)) waiting {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	var w waiting
	var sum, n int64
	for {
		select {
		case <-ctx.Done():
			if n > 0 {
				w.mean = sum / n
			}
			return w
		case <-t.C:
		}
		done, _, _ := completed()
		v := inserted.Load() - done
		if n == 0 || v < w.min {
			w.min = v
		}
		sum += v
		n++
	}
}

// keepBacklog inserts batches whenever fewer than cfg.backlog jobs wait.
func keepBacklog(ctx context.Context, c *pgqueue.Client, cfg benchConfig, inserted *atomic.Int64, completed func() (int64, int64, int64)) error {
	ps := make([]queue.EnqueueParams, cfg.batch)
	next := 0
	for ctx.Err() == nil {
		done, _, _ := completed()
		if inserted.Load()-done >= int64(cfg.backlog) {
			// A batch is built only once it is to be inserted: one
			// built at every look at a full backlog spent the CPU the
			// measured worker shares (docs/benchmarks/limits.md).
			time.Sleep(2 * time.Millisecond)
			continue
		}
		for i := range ps {
			ps[i] = queue.EnqueueParams{Kind: "bench", Args: cfg.limits.args(next)}
			next++
		}
		// The run's end does not cut an insert in flight off: cut between
		// its commit and its wake-up, it logged the wake-up as failed. A
		// batch takes tens of milliseconds; the minute bounds a stuck one.
		insCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		n, err := c.EnqueueMany(insCtx, ps)
		cancel()
		if err != nil {
			return err
		}
		inserted.Add(n)
	}
	return ctx.Err()
}

// readMachine reads the machine's CPU times now and returns a function
// giving what the machine has spent since, zero where the system cannot
// tell.
func readMachine() (since func() cpuclock.Machine) {
	m0, err := cpuclock.ReadMachine()
	return func() cpuclock.Machine {
		m1, err1 := cpuclock.ReadMachine()
		if err != nil || err1 != nil {
			return cpuclock.Machine{}
		}
		return m1.Since(m0)
	}
}
