package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/internal/devenv"
	"github.com/jobfence/jobfence/migrations"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// errPgBouncerNeedsThrowaway refuses --pgbouncer against a server of the
// user's: the bench's PgBouncer trusts loopback clients and has no
// password to log in upstream with.
var errPgBouncerNeedsThrowaway = errors.New("--pgbouncer runs PgBouncer in front of the bench's own throwaway PostgreSQL: leave out --database-url and unset DATABASE_URL")

// fleetResult is one run of a fleet of worker processes.
type fleetResult struct {
	benchResult
	instances int
	via       string
	// act is what sampling pg_stat_activity found.
	act activity
}

func (r fleetResult) String() string {
	return fmt.Sprintf("%d instances via %s: %s\n"+
		"    server connections max %d; claims waiting for their turn %.2f backends per sample; claim lock waits %.2f backends per sample (%.0f%% of samples); "+
		"lock waiters per sample by statement/wait event: %s",
		r.instances, r.via, r.benchResult, r.act.maxConns, r.act.turnWaitMean(),
		r.act.claimWaitMean(), 100*r.act.perSample(r.act.claimSamples), r.act.breakdown())
}

// fleetSetup is what every run of a fleet shares: the server, and
// PgBouncer when asked for.
type fleetSetup struct {
	baseURL  string
	self     string
	stderr   io.Writer // the worker processes' stderr
	log      *slog.Logger
	bouncer  bool
	poolSize int
}

// fleetOnce runs one mode with cfg.instances worker processes, each with a
// pool of its own, as a role of the run's own whose default search_path is
// a fresh schema (the way to choose the schema through PgBouncer, where a
// search_path startup parameter would be session state).
func fleetOnce(ctx context.Context, fs fleetSetup, mode string, cfg benchConfig, settings serverSettings) (fleetResult, error) {
	name := fmt.Sprintf("jobfence_bench_%d", time.Now().UnixNano())
	workURL, drop, err := devenv.CreateRoleSchema(ctx, fs.baseURL, name)
	if err != nil {
		return fleetResult{}, err
	}
	defer drop()
	pr, err := newProbe(ctx, fs.baseURL, name, settings)
	if err != nil {
		return fleetResult{}, err
	}
	defer pr.close()
	u, err := url.Parse(workURL)
	if err != nil {
		return fleetResult{}, err
	}
	if err := migrations.Up(ctx, workURL); err != nil {
		return fleetResult{}, err
	}
	if err := setTableOptions(ctx, pr.conn, name, cfg.storageOptions()); err != nil {
		return fleetResult{}, err
	}
	res := fleetResult{instances: cfg.instances, via: "PostgreSQL directly"}
	if fs.bouncer {
		b, err := devenv.StartPgBouncer(ctx, devenv.PgBouncerOptions{
			Upstream: u.Host, Database: strings.TrimPrefix(u.Path, "/"), Users: []string{name}, PoolSize: fs.poolSize,
		})
		if err != nil {
			return fleetResult{}, err
		}
		defer b.Stop()
		workURL = b.URL(name)
		res.via = fmt.Sprintf("PgBouncer (transaction mode, pool size %d)", fs.poolSize)
	}
	if workURL, err = withExecMode(workURL, cfg.execMode); err != nil {
		return fleetResult{}, err
	}
	producerPool, err := newBenchPool(ctx, workURL, int32(max(4, cfg.inserters+1)))
	if err != nil {
		return fleetResult{}, err
	}
	defer producerPool.Close()
	producer := pgqueue.New(producerPool, pgqueue.Config{PollOnly: fs.bouncer, Logger: fs.log})
	r := benchResult{statements: cfg.statements}
	prefilled, err := prepareRun(ctx, mode, cfg, producer, pr, &r)
	if err != nil {
		return fleetResult{}, err
	}
	c0, err := pr.counters(ctx)
	if err != nil {
		return fleetResult{}, err
	}
	children, err := startBenchChildren(ctx, fs, workURL, cfg)
	defer children.stop()
	if err != nil {
		return fleetResult{}, err
	}
	samples := sampleActivity(ctx, fs.baseURL, name)
	start, machine := time.Now(), readMachine()
	var inserted atomic.Int64
	inserted.Store(prefilled)
	if err := runMode(ctx, mode, cfg, producer, &inserted, start, children.completed, pr, &r); err != nil {
		return fleetResult{}, err
	}
	r.machine = machine()
	res.act = samples()
	if err := children.stop(); err != nil {
		return fleetResult{}, err
	}
	producerPool.Close()
	if err := r.settle(ctx, mode, children.completed, pr, c0, name); err != nil {
		return fleetResult{}, err
	}
	// The workers are other processes: this one's CPU says nothing of them.
	r.cpu = 0
	r.conns = res.act.maxConns
	res.benchResult = r
	return res, nil
}

// benchChildren are the worker processes of a fleet run.
type benchChildren struct {
	procs []*benchChild
	once  sync.Once
	err   error
}

type benchChild struct {
	cmd                    *exec.Cmd
	stdin                  io.WriteCloser
	completed, stale, errs atomic.Int64
	done                   chan struct{}
}

func startBenchChildren(ctx context.Context, fs fleetSetup, workURL string, cfg benchConfig) (*benchChildren, error) {
	cs := &benchChildren{}
	args := []string{"bench-proc", "--concurrency", strconv.Itoa(cfg.concurrency),
		"--fetchers", strconv.Itoa(cfg.fetchers), "--fetch-limit", strconv.Itoa(cfg.fetchLimit),
		"--completers", strconv.Itoa(cfg.completers), "--conns", strconv.Itoa(cfg.conns)}
	if fs.bouncer {
		args = append(args, "--poll-only")
	}
	for range cfg.instances {
		cmd := exec.CommandContext(ctx, fs.self, args...)
		// demoChildEnv makes a test binary run the command, as jobfence does.
		cmd.Env = append(os.Environ(), demoChildEnv+"=1", "DATABASE_URL="+workURL)
		cmd.Stderr = fs.stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return cs, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return cs, err
		}
		if err := cmd.Start(); err != nil {
			return cs, fmt.Errorf("bench: start worker process: %w", err)
		}
		c := &benchChild{cmd: cmd, stdin: stdin, done: make(chan struct{})}
		cs.procs = append(cs.procs, c)
		go c.read(stdout)
	}
	return cs, nil
}

// read keeps the child's latest counters until its stdout closes.
func (c *benchChild) read(stdout io.Reader) {
	defer close(c.done)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var n, stale, errs int64
		if _, err := fmt.Sscanf(sc.Text(), "stats %d %d %d", &n, &stale, &errs); err == nil {
			c.completed.Store(n)
			c.stale.Store(stale)
			c.errs.Store(errs)
		}
	}
}

// completed sums the children's latest counters.
func (cs *benchChildren) completed() (n, stale, errs int64) {
	for _, c := range cs.procs {
		n += c.completed.Load()
		stale += c.stale.Load()
		errs += c.errs.Load()
	}
	return n, stale, errs
}

// stop closes every child's stdin, so each stops its worker and reports
// its last counters, and waits for them to exit.
func (cs *benchChildren) stop() error {
	cs.once.Do(func() {
		for _, c := range cs.procs {
			c.stdin.Close()
		}
		for _, c := range cs.procs {
			<-c.done
			if err := c.cmd.Wait(); err != nil && cs.err == nil {
				cs.err = fmt.Errorf("bench: worker process %d: %w", c.cmd.Process.Pid, err)
			}
		}
	})
	return cs.err
}

// activity is what sampling pg_stat_activity found.
type activity struct {
	samples  int
	maxConns int
	// claimSamples counts samples in which a claim waited for a lock.
	claimSamples int
	// waits counts lock waiters over all samples by "statement/wait
	// event" (claim, outcome or insert; tuple, transactionid, extend ...).
	waits map[string]int
}

// claimWaitMean is the mean number of claims waiting for a lock per
// sample, once they have their turn.
func (a activity) claimWaitMean() float64 { return a.waitMean("claim/") }

// turnWaitMean is the mean number of claims waiting for their turn per
// sample (claimTurnSQL's advisory lock).
func (a activity) turnWaitMean() float64 { return a.waitMean("turn/") }

func (a activity) waitMean(prefix string) float64 {
	n := 0
	for k, v := range a.waits {
		if strings.HasPrefix(k, prefix) {
			n += v
		}
	}
	return a.perSample(n)
}

func (a activity) perSample(n int) float64 {
	if a.samples == 0 {
		return 0
	}
	return float64(n) / float64(a.samples)
}

// breakdown lists the lock waiters per sample by statement and wait event,
// most first.
func (a activity) breakdown() string {
	keys := make([]string, 0, len(a.waits))
	for k := range a.waits {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return a.waits[keys[i]] > a.waits[keys[j]] })
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, a.perSample(a.waits[k])))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// activitySQL classifies the role's backends waiting for a lock
// (wait_event_type 'Lock') by statement: a claim's wait for its turn (the
// advisory lock of pgqueue's claimTurnSQL), a claim (FOR UPDATE SKIP
// LOCKED), an insert (COPY) or an outcome or heartbeat.
const activitySQL = `
SELECT count(*), coalesce(string_agg(
    CASE WHEN query LIKE '%pg_advisory_xact_lock%' THEN 'turn'
        WHEN query LIKE '%SKIP LOCKED%' THEN 'claim'
        WHEN query LIKE 'COPY%' THEN 'insert' ELSE 'outcome' END
    || '/' || wait_event, ',') FILTER (WHERE wait_event_type = 'Lock'), '')
FROM pg_stat_activity WHERE usename = $1 OR application_name = $1`

// sampleActivity samples, every 50ms, the backends of role (or of that
// application_name): how many there are and which wait for a lock. The returned function stops sampling and
// returns what it found.
func sampleActivity(ctx context.Context, baseURL, role string) func() activity {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan activity, 1)
	go func() {
		a := activity{waits: map[string]int{}}
		defer func() { done <- a }()
		conn, err := pgx.Connect(ctx, baseURL)
		if err != nil {
			return
		}
		defer conn.Close(context.Background())
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			var conns int
			var waiting string
			if err := conn.QueryRow(ctx, activitySQL, role).Scan(&conns, &waiting); err != nil {
				return
			}
			a.samples++
			a.maxConns = max(a.maxConns, conns)
			claimed := false
			for _, w := range strings.Split(waiting, ",") {
				if w == "" {
					continue
				}
				a.waits[w]++
				claimed = claimed || strings.HasPrefix(w, "claim/")
			}
			if claimed {
				a.claimSamples++
			}
		}
	}()
	return func() activity {
		cancel()
		return <-done
	}
}

// loadAverage is the machine's 1, 5 and 15 minute load averages.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
