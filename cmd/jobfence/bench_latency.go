package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobfence/jobfence/internal/cpuclock"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// latencyResult is one run of --mode latency.
type latencyResult struct {
	rate      float64
	duration  time.Duration
	producers int
	offered   int64
	// late counts offers that found every producer busy and waited for
	// one (a web server's requests would queue the same way).
	late int64
	// start are enqueue-to-start times of the jobs offered after the
	// warm-up: from the producer's clock reading just before its insert
	// to the handler's first instruction, one process, one clock.
	warmup time.Duration
	start  percentiles
	// dbStart are the same jobs' attempted_at - created_at: the
	// database's clock from the insert's transaction start to the
	// claim's, without the client's side of either.
	dbStart percentiles
	// stagesAll and stagesSlow are the mean stage times of every job
	// and of the slowest 1 % (stageTrace).
	stagesAll, stagesSlow stages
	nAll, nSlow           int
	// insert are the insert calls' times (the insert committed and its
	// wake-up sent).
	insert percentiles
	// claims are the worker's claims' round trips; claimed the jobs they
	// took (empty claims included); finishes the outcome batches.
	claims            percentiles
	claimed, finishes int64
	finished          int64
	cost              cost
	// cpu is this process's CPU time (the producers and the worker) and
	// machine the machine's, from the warm-up's end until the last job
	// started: on an otherwise idle machine, machine less cpu is the
	// server's share.
	cpu     time.Duration
	machine cpuclock.Machine
	// top lists the costliest statements (--statements).
	top   string
	conns int
	load  string
}

func (r latencyResult) String() string {
	return fmt.Sprintf("offered %.0f jobs/s for %s, each inserted in a transaction of its own by %d producers (%d offers, %d waited for a free producer)\n"+
		"    enqueue-to-start %s (%d jobs offered after a %s warm-up; from the clock read before the insert to the handler's start)\n"+
		"    database clock   %s (attempted_at - created_at of the same jobs)\n"+
		"    stages, mean of %d jobs: %s\n"+
		"    stages, mean of the slowest %d: %s\n"+
		"    insert call %s; claims %s, %.2f jobs each (%d claims); %.1f outcomes per completion batch\n"+
		"    cost: %s; connections max %d; load %s%s",
		r.rate, r.duration, r.producers, r.offered, r.late, r.start, r.start.n, r.warmup, r.dbStart,
		r.nAll, r.stagesAll, r.nSlow, r.stagesSlow, r.insert,
		r.claims, float64(r.claimed)/float64(max(r.claims.n, 1)), r.claims.n, float64(r.finished)/float64(max(r.finishes, 1)),
		r.cost, r.conns, r.load, cpuPerJob(r.start.n, r.cpu, r.machine)) + r.top
}

// cpuPerJob says what a job cost in CPU, empty where the system cannot
// tell: this process's share, and the machine's with its busy share (on
// an otherwise idle machine the difference is the server's).
func cpuPerJob(jobs int, cpu time.Duration, machine cpuclock.Machine) string {
	if jobs == 0 || cpu <= 0 {
		return ""
	}
	s := fmt.Sprintf("\n    CPU per job: this process (producers and worker) %.0f µs", float64(cpu.Microseconds())/float64(jobs))
	if machine.CPUs > 0 {
		s += fmt.Sprintf(", the machine %.0f µs (busy %.0f %% of %d CPUs, steal %.0f %%)",
			float64(machine.Busy.Microseconds())/float64(jobs), 100*machine.BusyShare(), machine.CPUs, 100*machine.StealShare())
	}
	return s
}

// percentiles summarises durations.
type percentiles struct {
	n                   int
	p50, p90, p99, pmax time.Duration
}

func summarise(d []time.Duration) percentiles {
	if len(d) == 0 {
		return percentiles{}
	}
	slices.Sort(d)
	at := func(q float64) time.Duration { return d[min(len(d)-1, int(q*float64(len(d))))] }
	return percentiles{n: len(d), p50: at(0.50), p90: at(0.90), p99: at(0.99), pmax: d[len(d)-1]}
}

func (p percentiles) String() string {
	r := func(d time.Duration) string { return d.Round(10 * time.Microsecond).String() }
	return fmt.Sprintf("p50 %s p90 %s p99 %s max %s", r(p.p50), r(p.p90), r(p.p99), r(p.pmax))
}

// runLatencyBench runs --mode latency runs times and prints each run and
// the medians; with cfg.floor, each run is paired with a floor run
// (floorOnce), the two taking turns going first.
func runLatencyBench(ctx context.Context, dbURL string, cfg benchConfig, runs int, settings serverSettings, stdout io.Writer) error {
	var rs []latencyResult
	var fs []floorResult
	for r := range runs {
		floor := func() error {
			if !cfg.floor {
				return nil
			}
			res, err := floorOnce(ctx, dbURL, cfg, settings)
			if err != nil {
				return fmt.Errorf("floor run %d: %w", r+1, err)
			}
			fs = append(fs, res)
			fmt.Fprintf(stdout, "floor      run %d: %s\n", r+1, res)
			return nil
		}
		if r%2 == 1 {
			if err := floor(); err != nil {
				return err
			}
		}
		res, err := latencyOnce(ctx, dbURL, cfg, settings)
		if err != nil {
			return fmt.Errorf("latency run %d: %w", r+1, err)
		}
		rs = append(rs, res)
		fmt.Fprintf(stdout, "latency    run %d: %s\n", r+1, res)
		if r%2 == 0 {
			if err := floor(); err != nil {
				return err
			}
		}
	}
	m := medianPercentiles(rs, func(r latencyResult) percentiles { return r.start })
	db := medianPercentiles(rs, func(r latencyResult) percentiles { return r.dbStart })
	fmt.Fprintf(stdout, "latency    median of %d at %.0f jobs/s: enqueue-to-start %s; database clock %s\n", len(rs), cfg.rate, m, db)
	if cfg.floor {
		ratios := make([]string, len(fs))
		for i, f := range fs {
			ratios[i] = fmt.Sprintf("%.2f", float64(rs[i].start.p99)/float64(max(f.start.p99, 1)))
		}
		fm := medianPercentiles(fs, func(r floorResult) percentiles { return r.start })
		fdb := medianPercentiles(fs, func(r floorResult) percentiles { return r.dbStart })
		fmt.Fprintf(stdout, "floor      median of %d at %.0f jobs/s: enqueue-to-start %s; database clock %s; p99 jobfence/floor by pair %s\n",
			len(fs), cfg.rate, fm, fdb, strings.Join(ratios, ", "))
	}
	return nil
}

// medianPercentiles is, for each percentile, its median over the runs rs
// of the figures f picks.
func medianPercentiles[R any](rs []R, f func(R) percentiles) percentiles {
	med := func(g func(percentiles) time.Duration) time.Duration {
		v := make([]time.Duration, len(rs))
		for i, r := range rs {
			v[i] = g(f(r))
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return percentiles{
		p50:  med(func(p percentiles) time.Duration { return p.p50 }),
		p90:  med(func(p percentiles) time.Duration { return p.p90 }),
		p99:  med(func(p percentiles) time.Duration { return p.p99 }),
		pmax: med(func(p percentiles) time.Duration { return p.pmax }),
	}
}

// latencyOnce offers cfg.rate jobs a second for cfg.duration to a worker
// in this process, each inserted by one of cfg.producers goroutines in a
// transaction of its own, and times each job from just before its insert
// to its handler's start.
func latencyOnce(ctx context.Context, baseURL string, cfg benchConfig, settings serverSettings) (latencyResult, error) {
	name := fmt.Sprintf("jobfence_bench_%d", time.Now().UnixNano())
	pr, err := newProbe(ctx, baseURL, name, settings)
	if err != nil {
		return latencyResult{}, err
	}
	defer pr.close()
	url, drop, err := runSchema(ctx, pr.conn, baseURL, name, cfg.storageOptions())
	if err != nil {
		return latencyResult{}, err
	}
	defer drop()
	if url, err = withApplicationName(url, name); err != nil {
		return latencyResult{}, err
	}
	quiet := slog.New(slog.DiscardHandler)
	prodPool, err := newBenchPool(ctx, url, int32(cfg.producers))
	if err != nil {
		return latencyResult{}, err
	}
	defer prodPool.Close()
	producer := pgqueue.New(prodPool, pgqueue.Config{Logger: quiet})
	defer producer.Close()
	workPool, err := newBenchPool(ctx, url, int32(cfg.conns))
	if err != nil {
		return latencyResult{}, err
	}
	defer workPool.Close()

	res := latencyResult{rate: cfg.rate, duration: cfg.duration, producers: cfg.producers, warmup: min(cfg.duration/5, benchWarmup)}
	var started sync.Mutex
	var startTimes, dbTimes []time.Duration
	var warmFrom atomic.Int64 // Unix nanoseconds; jobs inserted from then on count
	warmFrom.Store(time.Now().Add(time.Hour).UnixNano())
	var completed atomic.Int64
	trace := newStageTrace()
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[benchArgs]) error {
		now := time.Now().UnixNano()
		if at := job.Args.At; at >= warmFrom.Load() {
			started.Lock()
			startTimes = append(startTimes, time.Duration(now-at))
			dbTimes = append(dbTimes, job.AttemptedAt.Sub(job.CreatedAt))
			started.Unlock()
			trace.handler(job.ID, at, now)
		}
		completed.Add(1)
		return nil
	})
	var hookMu sync.Mutex
	var claimTimes []time.Duration
	wcfg := benchWorkerConfig("bench", cfg, quiet)
	wcfg.Hooks.JobStart = func(ctx context.Context, job *queue.Job) context.Context {
		trace.jobStart(job.ID, time.Now().UnixNano())
		return ctx
	}
	wcfg.Hooks.Claim = func(ctx context.Context, ci worker.ClaimInfo) {
		if ci.Finish {
			// Outcomes claim only under a limit, which this mode refuses
			// (limitBench.validate); their round trip would be an outcome
			// batch's, not a claim's to time.
			return
		}
		now := time.Now().UnixNano()
		trace.claim(now, ci.Duration)
		if now < warmFrom.Load() {
			return
		}
		hookMu.Lock()
		claimTimes = append(claimTimes, ci.Duration)
		res.claimed += int64(ci.Jobs)
		hookMu.Unlock()
	}
	wcfg.Hooks.Finish = func(ctx context.Context, fi worker.FinishInfo) {
		if time.Now().UnixNano() < warmFrom.Load() {
			return
		}
		hookMu.Lock()
		res.finishes++
		res.finished += int64(fi.Jobs)
		hookMu.Unlock()
	}
	w, err := worker.New(pgqueue.New(workPool, pgqueue.Config{Logger: quiet}), reg, wcfg)
	if err != nil {
		return latencyResult{}, err
	}
	samples := sampleActivity(ctx, baseURL, name)
	if err := w.Start(ctx); err != nil {
		return latencyResult{}, err
	}
	stopWorker := func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		w.Stop(stopCtx)
	}
	defer stopWorker()

	offers := make(chan struct{}, max(int(cfg.rate), 1))
	var inserted atomic.Int64
	var insertMu sync.Mutex
	var insertTimes []time.Duration
	var insertErr error
	var producers sync.WaitGroup
	for range cfg.producers {
		producers.Add(1)
		go func() {
			defer producers.Done()
			var mine []time.Duration
			defer func() {
				insertMu.Lock()
				insertTimes = append(insertTimes, mine...)
				insertMu.Unlock()
			}()
			for range offers {
				at := time.Now()
				r, err := producer.Insert(ctx, benchArgs{At: at.UnixNano()}, nil)
				if err != nil {
					insertMu.Lock()
					if insertErr == nil {
						insertErr = err
					}
					insertMu.Unlock()
					continue
				}
				trace.insert(r.ID, time.Now().UnixNano())
				if at.UnixNano() >= warmFrom.Load() {
					mine = append(mine, time.Since(at))
				}
				inserted.Add(1)
			}
		}()
	}

	var win window
	// analyzed reports the warm-up's ANALYZE.
	analyzed := make(chan error, 1)
	res.offered, res.late, err = pace(ctx, cfg, res.warmup, offers,
		func() {
			// Halfway through the warm-up, as autovacuum would within a
			// minute: the table was analyzed empty, and the statements
			// planned then (a completion's sequential scan of what was a
			// one-page table) stay cached on their connections until
			// new statistics invalidate them.
			go func() { analyzed <- analyzeJobs(ctx, producer) }()
		},
		func() error { return win.open(ctx, pr, &warmFrom) })
	close(offers)
	producers.Wait()
	if err != nil {
		return latencyResult{}, err
	}
	if err := <-analyzed; err != nil {
		return latencyResult{}, err
	}
	if insertErr != nil {
		return latencyResult{}, fmt.Errorf("insert: %w", insertErr)
	}
	if ctx.Err() != nil {
		return latencyResult{}, ctx.Err()
	}
	// Every inserted job must start: one that does not is a lost wake-up
	// the poll would only cover a PollInterval later, and belongs in the
	// figures.
	deadline := time.Now().Add(30 * time.Second)
	for completed.Load() < inserted.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n, want := completed.Load(), inserted.Load(); n < want {
		return latencyResult{}, fmt.Errorf("only %d of %d jobs ran within 30s of the last insert", n, want)
	}
	res.cpu, res.machine = win.cpu()
	c1, err := pr.counters(ctx)
	if err != nil {
		return latencyResult{}, err
	}
	stopWorker()
	res.conns = samples().maxConns
	res.load = loadAverage()
	started.Lock()
	res.start = summarise(startTimes)
	res.dbStart = summarise(dbTimes)
	res.stagesAll, res.stagesSlow, res.nAll, res.nSlow = trace.breakdown()
	started.Unlock()
	res.insert = summarise(insertTimes)
	hookMu.Lock()
	res.claims = summarise(claimTimes)
	hookMu.Unlock()
	res.cost = costBetween(win.counters, c1, int64(res.start.n))
	if cfg.statements {
		res.top = res.cost.topStatements(5)
	}
	return res, nil
}

// pace offers cfg.rate jobs a second on offers for cfg.duration, one
// struct{} a job: every millisecond it offers the jobs due by the clock,
// so that a ticker that fell behind catches up instead of lowering the
// rate, and an offer that finds every producer busy waits for one (late
// counts them). It calls halfway once halfway through warmup, and warmed
// at its end (an error from warmed stops the offers and is returned).
func pace(ctx context.Context, cfg benchConfig, warmup time.Duration, offers chan<- struct{}, halfway func(), warmed func() error) (offered, late int64, err error) {
	begin := time.Now()
	half, warm := false, false
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for now := range tick.C {
		if ctx.Err() != nil {
			return offered, late, ctx.Err()
		}
		if !half && now.Sub(begin) >= warmup/2 {
			half = true
			halfway()
		}
		if !warm && now.Sub(begin) >= warmup {
			warm = true
			if err := warmed(); err != nil {
				return offered, late, err
			}
		}
		elapsed := min(now.Sub(begin), cfg.duration)
		for due := int64(cfg.rate * elapsed.Seconds()); offered < due; offered++ {
			select {
			case offers <- struct{}{}:
			default:
				late++
				offers <- struct{}{}
			}
		}
		if elapsed >= cfg.duration {
			return offered, late, nil
		}
	}
	return offered, late, nil
}

// window is a run's measured window, opened at the warm-up's end: the
// server's counters, this process's CPU time and the machine's then.
type window struct {
	counters dbCounters
	cpu0     time.Duration
	machine  func() cpuclock.Machine
}

// open opens the window and stores its start in from (Unix nanoseconds),
// from which the jobs offered count.
func (w *window) open(ctx context.Context, pr *probe, from *atomic.Int64) error {
	var err error
	if w.counters, err = pr.counters(ctx); err != nil {
		return err
	}
	w.cpu0, w.machine = cpuclock.Process(), readMachine()
	from.Store(time.Now().UnixNano())
	return nil
}

// cpu returns this process's CPU time and the machine's since the window
// opened; zero if it never did.
func (w *window) cpu() (time.Duration, cpuclock.Machine) {
	if w.machine == nil {
		return 0, cpuclock.Machine{}
	}
	return cpuclock.Process() - w.cpu0, w.machine()
}
