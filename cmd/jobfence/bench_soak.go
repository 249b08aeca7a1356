package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/worker"
)

// soakConfig is --mode soak's: a continuous run with the worker's pruning
// on, reporting every interval how the rate and the jobs table hold.
type soakConfig struct {
	// retention is the worker's Retention (--retention).
	retention time.Duration
	// interval is how often a line reports (--report-interval).
	interval time.Duration
	// serverLog is the throwaway server's log, where the jobs table's
	// autovacuum passes are logged with their durations; empty with
	// --database-url, whose server's log the bench cannot read.
	serverLog string
	// out receives each interval's line as it is measured.
	out io.Writer
}

func (c soakConfig) validate(duration time.Duration) error {
	if c.retention <= 0 {
		return fmt.Errorf("--retention %s: want a positive duration such as 10m", c.retention)
	}
	if c.interval <= 0 {
		return fmt.Errorf("--report-interval %s: want a positive duration such as 1m", c.interval)
	}
	if duration < 3*c.interval {
		return fmt.Errorf("--duration %s with --report-interval %s: a soak needs at least 3 report intervals (its summary compares the start, the middle and the end)",
			duration, c.interval)
	}
	return nil
}

// pruneInterval is the worker's PruneInterval in a soak: a tenth of the
// retention, from 1s up to the worker's default of 1m. The worker waits
// from half to one and a half intervals between passes, so a finished job
// is kept for the retention and up to one and a half intervals more (15 %
// for a retention from 10s to 10m), and a pass has a tenth of the
// retention's jobs to delete rather than all of them at once.
func (c soakConfig) pruneInterval() time.Duration {
	return min(max(c.retention/10, time.Second), time.Minute)
}

// configure turns the worker's pruning on with the soak's retention.
func (c soakConfig) configure(wcfg *worker.Config) {
	wcfg.DisableMaintenance = false
	wcfg.Retention = c.retention
	wcfg.PruneInterval = c.pruneInterval()
}

// runSoakBench runs one soak and prints its summary against the targets of
// issue 33.
func runSoakBench(ctx context.Context, dbURL string, cfg benchConfig, settings serverSettings, log *slog.Logger, stdout io.Writer) error {
	cfg.soak.out = stdout
	res, err := benchOnce(ctx, dbURL, "soak", cfg, settings, log)
	if err != nil {
		return fmt.Errorf("soak: %w", err)
	}
	fmt.Fprintf(stdout, "%-10s run 1: %s\n", "soak", res)
	r := res.soak
	fmt.Fprintf(stdout, "soak target: %s\n", r.rateTarget())
	fmt.Fprintf(stdout, "soak target: %s\n", r.growthTarget())
	fmt.Fprintf(stdout, "soak finished: %s\n", r.finishedGrowth())
	fmt.Fprintf(stdout, "soak end: %d rows in the jobs table (count(*) once the worker stopped) of %d jobs inserted; %d pruned\n",
		r.rows, r.inserted, r.pruned)
	return nil
}

// prepareSoak sets up the run's jobs table for a soak and prints what the
// soak runs with: its retention, and the autovacuum settings the table has.
func prepareSoak(ctx context.Context, conn *pgx.Conn, schema string, cfg benchConfig) error {
	c := cfg.soak
	table := pgx.Identifier{schema, "jobfence_jobs"}.Sanitize()
	if c.serverLog != "" {
		// On the bench's own server only: a user's log is not the
		// bench's to fill.
		if _, err := conn.Exec(ctx, "ALTER TABLE "+table+" SET (log_autovacuum_min_duration = 0)"); err != nil {
			return fmt.Errorf("bench: log the jobs table's autovacuum passes: %w", err)
		}
	}
	var s [8]string
	var reloptions string
	if err := conn.QueryRow(ctx, soakSettingsSQL, table).Scan(&s[0], &s[1], &s[2], &s[3], &s[4], &s[5], &s[6], &s[7], &reloptions); err != nil {
		return fmt.Errorf("bench: read the autovacuum settings: %w", err)
	}
	fmt.Fprintf(c.out, "soak: %s of continuous work with the worker's pruning on: retention %s, prune interval %s (a tenth of the retention, from 1s to 1m), a line every %s\n",
		cfg.duration, c.retention, c.pruneInterval(), c.interval)
	fmt.Fprintf(c.out, "soak: server autovacuum=%s naptime=%s vacuum_scale_factor=%s vacuum_threshold=%s vacuum_insert_scale_factor=%s vacuum_cost_limit=%s (vacuum_cost_limit=%s) vacuum_cost_delay=%s; jobs table options: %s\n",
		s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], reloptions)
	if c.serverLog != "" {
		fmt.Fprintln(c.out, "soak: each autovacuum pass's duration is read from the server's log (log_autovacuum_min_duration = 0 on the jobs table)")
	} else {
		fmt.Fprintln(c.out, "soak: autovacuum durations are unavailable: with --database-url the bench cannot read the server's log, and pg_stat_user_tables has no duration; a pass in progress is shown from pg_stat_progress_vacuum (needs pg_read_all_stats)")
	}
	return nil
}

const soakSettingsSQL = `SELECT current_setting('autovacuum'), current_setting('autovacuum_naptime'),
    current_setting('autovacuum_vacuum_scale_factor'), current_setting('autovacuum_vacuum_threshold'),
    current_setting('autovacuum_vacuum_insert_scale_factor'), current_setting('autovacuum_vacuum_cost_limit'),
    current_setting('vacuum_cost_limit'), current_setting('autovacuum_vacuum_cost_delay'),
    coalesce(array_to_string(reloptions, ', '), '')
FROM pg_class WHERE oid = $1::regclass`

// soakTableSQL reads the jobs table's sizes and statistics, the server's
// WAL position, and how long an autovacuum pass of the table has been
// running (NULL when none is).
const soakTableSQL = `SELECT pg_total_relation_size(c.oid), pg_relation_size(c.oid),
    coalesce(s.n_live_tup, 0), coalesce(s.n_dead_tup, 0), coalesce(s.autovacuum_count, 0),
    pg_current_wal_lsn()::text,
    (SELECT extract(epoch FROM clock_timestamp() - a.query_start)::float8
     FROM pg_stat_progress_vacuum v JOIN pg_stat_activity a ON a.pid = v.pid
     WHERE v.relid = c.oid AND a.backend_type = 'autovacuum worker' LIMIT 1)
FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.oid = $1::regclass`

const soakIndexesSQL = `SELECT ic.relname, pg_relation_size(ic.oid)
FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
WHERE i.indrelid = $1::regclass ORDER BY ic.relname`

// soakFinishedSQL reads the size of the finished-jobs table (every
// partition's pg_total_relation_size) and how many partitions it has.
const soakFinishedSQL = `SELECT coalesce(sum(pg_total_relation_size(i.inhrelid)), 0)::bigint, count(*)
FROM pg_inherits i WHERE i.inhparent = to_regclass($1)`

// relSize is a relation's size in bytes.
type relSize struct {
	name  string
	bytes int64
}

// soakSample is one reading of a soak: the worker's counters, the jobs
// table's and the server's.
type soakSample struct {
	// at is the interval's planned end, from the workers' start; when is
	// the time the worker's counters were read.
	at   time.Duration
	when time.Time
	// completed and pruned count from the workers' start; waiting is the
	// jobs inserted and not yet completed.
	completed, pruned, waiting int64
	// total is pg_total_relation_size (the heap, its TOAST table and the
	// indexes); heap is the main fork alone.
	total, heap int64
	indexes     []relSize
	live, dead  int64
	autovacuums int64
	// vacuumLog says whether the server's log is followed; then
	// loggedPasses and lastVacuum are its passes of the table and the
	// last one's duration.
	vacuumLog    bool
	loggedPasses int64
	lastVacuum   time.Duration
	// vacuumRunning is how long a pass in progress has run; zero when
	// none is.
	vacuumRunning time.Duration
	wal           uint64
	// finished is the finished-jobs table's size, its partitions'
	// together, and parts how many partitions it has.
	finished, parts int64
}

// soakReporter reads a sample every interval on a connection of its own
// (the probe's is busy with the run) and prints a line for each.
type soakReporter struct {
	cfg      soakConfig
	duration time.Duration
	table    string
	finished string
	conn     *pgx.Conn
	log      *autovacuumLog
	samples  []soakSample
	cancel   context.CancelFunc
	done     chan error
}

// newSoakReporter connects a reporter for schema's jobs table.
func newSoakReporter(ctx context.Context, baseURL, schema string, cfg benchConfig) (*soakReporter, error) {
	r := &soakReporter{cfg: cfg.soak, duration: cfg.duration, table: pgx.Identifier{schema, "jobfence_jobs"}.Sanitize(),
		finished: pgx.Identifier{schema, "jobfence_jobs_finished"}.Sanitize()}
	if cfg.soak.serverLog != "" {
		var err error
		if r.log, err = followAutovacuumLog(cfg.soak.serverLog, schema); err != nil {
			return nil, err
		}
	}
	conn, err := pgx.Connect(ctx, baseURL)
	if err != nil {
		return nil, fmt.Errorf("bench: soak reporter: %w", err)
	}
	r.conn = conn
	return r, nil
}

// soakSampleBound bounds one sample's queries.
const soakSampleBound = 30 * time.Second

// start reads the first sample at the workers' start, then one at the end
// of each interval until the run's duration, in the background.
func (r *soakReporter) start(ctx context.Context, start time.Time, stats func() worker.Stats, inserted *atomic.Int64) error {
	ctx, r.cancel = context.WithCancel(ctx)
	s, err := r.read(ctx, 0, stats, inserted)
	if err != nil {
		r.cancel()
		return err
	}
	r.samples = []soakSample{s}
	r.done = make(chan error, 1)
	go func() { r.done <- r.loop(ctx, start, stats, inserted) }()
	return nil
}

func (r *soakReporter) loop(ctx context.Context, start time.Time, stats func() worker.Stats, inserted *atomic.Int64) error {
	for k := 1; ; k++ {
		at := min(time.Duration(k)*r.cfg.interval, r.duration)
		t := time.NewTimer(time.Until(start.Add(at)))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		s, err := r.read(ctx, at, stats, inserted)
		if err != nil {
			return err
		}
		fmt.Fprintln(r.cfg.out, soakLine(r.samples[len(r.samples)-1], s))
		r.samples = append(r.samples, s)
		if at == r.duration {
			return nil
		}
	}
}

func (r *soakReporter) read(ctx context.Context, at time.Duration, stats func() worker.Stats, inserted *atomic.Int64) (soakSample, error) {
	ctx, cancel := context.WithTimeout(ctx, soakSampleBound)
	defer cancel()
	st := stats()
	s := soakSample{at: at, when: time.Now(), completed: st.Completed, pruned: st.Pruned}
	s.waiting = inserted.Load() - st.Completed
	var lsn string
	var running *float64
	if err := r.conn.QueryRow(ctx, soakTableSQL, r.table).Scan(&s.total, &s.heap, &s.live, &s.dead, &s.autovacuums, &lsn, &running); err != nil {
		return s, fmt.Errorf("bench: soak: read the jobs table's sizes: %w", err)
	}
	var err error
	if s.wal, err = parseLSN(lsn); err != nil {
		return s, err
	}
	if running != nil {
		s.vacuumRunning = max(time.Duration(*running*float64(time.Second)), time.Nanosecond)
	}
	if err := r.conn.QueryRow(ctx, soakFinishedSQL, r.finished).Scan(&s.finished, &s.parts); err != nil {
		return s, fmt.Errorf("bench: soak: read the finished table's size: %w", err)
	}
	rows, err := r.conn.Query(ctx, soakIndexesSQL, r.table)
	if err != nil {
		return s, fmt.Errorf("bench: soak: read the indexes' sizes: %w", err)
	}
	s.indexes, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (relSize, error) {
		var x relSize
		return x, row.Scan(&x.name, &x.bytes)
	})
	if err != nil {
		return s, fmt.Errorf("bench: soak: read the indexes' sizes: %w", err)
	}
	if r.log != nil {
		if err := r.log.read(); err != nil {
			return s, err
		}
		s.vacuumLog, s.loggedPasses, s.lastVacuum = true, r.log.passes, r.log.last
	}
	return s, nil
}

// wait waits for the last interval's line; a failed run stops the
// reporter instead (stop).
func (r *soakReporter) wait() error {
	err := <-r.done
	r.done <- err
	return err
}

// stop ends the reporter, if it still runs, and closes its connection.
func (r *soakReporter) stop() {
	if r.cancel != nil {
		r.cancel()
		if r.done != nil {
			r.wait()
		}
	}
	r.conn.Close(context.Background())
}

// report is the soak's samples and its end: rows left in the table and
// jobs inserted and pruned.
func (r *soakReporter) report(rows, inserted, pruned int64) *soakReport {
	return &soakReport{cfg: r.cfg, duration: r.duration, samples: r.samples, rows: rows, inserted: inserted, pruned: pruned}
}

// countJobs counts the rows of schema's jobs table.
func countJobs(ctx context.Context, conn *pgx.Conn, schema string) (int64, error) {
	var n int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "jobfence_jobs"}.Sanitize()).Scan(&n); err != nil {
		return 0, fmt.Errorf("bench: soak: count the jobs table's rows: %w", err)
	}
	return n, nil
}

// soakLine is the line for the interval from a to b.
func soakLine(a, b soakSample) string {
	jobs := b.completed - a.completed
	secs := b.when.Sub(a.when).Seconds()
	var sb strings.Builder
	fmt.Fprintf(&sb, "soak %8s: %.0f jobs/s (%d jobs), waiting %d, pruned %d (%d in all); jobs table %s: heap %s",
		b.at, float64(jobs)/max(secs, 1e-9), jobs, b.waiting, b.pruned-a.pruned, b.pruned, sizeText(b.total), sizeText(b.heap))
	for _, ix := range b.indexes {
		fmt.Fprintf(&sb, ", %s %s", ix.name, sizeText(ix.bytes))
	}
	fmt.Fprintf(&sb, "; tuples live %d, dead %d; autovacuum passes %d, last took %s", b.live, b.dead, b.autovacuums, b.lastVacuumText())
	if b.vacuumRunning > 0 {
		fmt.Fprintf(&sb, ", one running for %s", b.vacuumRunning.Round(time.Second))
	}
	if jobs > 0 {
		fmt.Fprintf(&sb, "; WAL %.0f bytes/job", float64(b.wal-min(a.wal, b.wal))/float64(jobs))
	} else {
		sb.WriteString("; WAL n/a bytes/job (no job completed)")
	}
	fmt.Fprintf(&sb, "; finished table %s in %d partitions", sizeText(b.finished), b.parts)
	return sb.String()
}

func (s soakSample) lastVacuumText() string {
	switch {
	case !s.vacuumLog:
		return "n/a (no server log)"
	case s.loggedPasses == 0 && s.autovacuums == 0:
		return "n/a (none yet)"
	case s.loggedPasses == 0:
		// pg_stat_user_tables counted a pass the log has not shown yet.
		return "n/a (not in the server log yet)"
	}
	return fmt.Sprintf("%.2f s", s.lastVacuum.Seconds())
}

// sizeText is a size as pg_size_pretty would round it, to a tenth.
func sizeText(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%d kB", b>>10)
}

// soakReport is what a soak measured, for its summary.
type soakReport struct {
	cfg      soakConfig
	duration time.Duration
	// samples[0] is at the workers' start, then one per interval.
	samples []soakSample
	// rows is the jobs table's rows at the end; inserted and pruned the
	// jobs the run inserted and its worker deleted.
	rows, inserted, pruned int64
}

// The targets of issue 33, for an hour's run: the last 10 minutes' rate at
// least 90 % of minutes 2-10's, and no growth beyond 10 % in the last 30
// minutes. A run of another length is held to the same fractions of it.
const (
	soakRateTarget   = 0.90
	soakGrowthTarget = 0.10
)

// windowRate is the rate over the intervals whose planned span lies in
// [from, to].
func (r *soakReport) windowRate(from, to time.Duration) (rate float64, ok bool) {
	var jobs int64
	var secs float64
	for i := 1; i < len(r.samples); i++ {
		a, b := r.samples[i-1], r.samples[i]
		if a.at >= from && b.at <= to {
			jobs += b.completed - a.completed
			secs += b.when.Sub(a.when).Seconds()
		}
	}
	if secs <= 0 {
		return 0, false
	}
	return float64(jobs) / secs, true
}

// rateTarget compares the rate of the run's last sixth (an hour's last 10
// minutes) with that of the intervals after the first up to the end of
// its first sixth (an hour's minutes 2-10).
func (r *soakReport) rateTarget() string {
	i := r.cfg.interval
	earlyFrom, earlyTo := i, max(r.duration/6, 2*i)
	lateFrom := r.duration - max(r.duration/6, i)
	// Both windows start at an interval's planned start.
	lateFrom = (lateFrom + i - 1) / i * i
	early, ok1 := r.windowRate(earlyFrom, earlyTo)
	late, ok2 := r.windowRate(lateFrom, r.duration)
	s := fmt.Sprintf("the rate of the last %s (%s-%s) ≥ %.0f %% of the rate of %s-%s: ",
		r.duration-lateFrom, lateFrom, r.duration, 100*soakRateTarget, earlyFrom, earlyTo)
	switch {
	case !ok1 || !ok2:
		return s + "no interval fell in a window: FAIL"
	case early <= 0:
		return s + fmt.Sprintf("%.0f / %.0f jobs/s, no job completed early on: FAIL", late, early)
	}
	ratio := late / early
	return s + fmt.Sprintf("%.0f / %.0f jobs/s = %.1f %%: %s", late, early, 100*ratio, verdict(ratio >= soakRateTarget))
}

// midAndEnd returns the samples at the run's middle (the last one at or
// before it) and at its end.
func (r *soakReport) midAndEnd() (mid, end soakSample) {
	end = r.samples[len(r.samples)-1]
	mid = r.samples[1]
	for _, s := range r.samples[1:] {
		if s.at <= r.duration/2 {
			mid = s
		}
	}
	return mid, end
}

// growthTarget compares the jobs table's and its indexes' sizes at the
// run's middle (an hour's minute 30) with those at its end.
func (r *soakReport) growthTarget() string {
	mid, end := r.midAndEnd()
	var parts []string
	worst, worstName := -1.0, ""
	add := func(name string, a, b int64) {
		g := float64(b-a) / float64(max(a, 1))
		parts = append(parts, fmt.Sprintf("%s %s → %s (%+.1f %%)", name, sizeText(a), sizeText(b), 100*g))
		if g > worst {
			worst, worstName = g, name
		}
	}
	add("jobs table", mid.total, end.total)
	add("heap", mid.heap, end.heap)
	before := map[string]int64{}
	for _, ix := range mid.indexes {
		before[ix.name] = ix.bytes
	}
	for _, ix := range end.indexes {
		add(ix.name, before[ix.name], ix.bytes)
	}
	return fmt.Sprintf("no growth beyond %.0f %% over the last %s (%s-%s): %s; the most %+.1f %% (%s): %s",
		100*soakGrowthTarget, end.at-mid.at, mid.at, end.at, strings.Join(parts, ", "), 100*worst, worstName,
		verdict(worst <= soakGrowthTarget))
}

// finishedGrowth says how the finished-jobs table changed from the run's
// middle to its end. It is no target: the table grows by the jobs of the
// partition being filled and drops the oldest partition whole, so it saws
// between its size at the retention and a partition's worth more.
func (r *soakReport) finishedGrowth() string {
	mid, end := r.midAndEnd()
	if end.parts == 0 {
		return "no partitions (finished jobs stay in the jobs table: a retention under a minute, or none made yet)"
	}
	return fmt.Sprintf("the finished table %s in %d partitions at %s, %s in %d at %s (%+.1f %%); it grows a partition at a time and drops the oldest whole",
		sizeText(mid.finished), mid.parts, mid.at, sizeText(end.finished), end.parts, end.at,
		100*float64(end.finished-mid.finished)/float64(max(mid.finished, 1)))
}

func verdict(pass bool) string {
	if pass {
		return "PASS"
	}
	return "FAIL"
}
