package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// limitBench is what a burn-down or continuous run measures of flow
// control (docs/limits.md): a limit on the bench's queue, set before its
// jobs are inserted, and how long each job runs.
type limitBench struct {
	// concurrency, when set, is one limit on the whole queue
	// (--limit-concurrency).
	concurrency int
	// partitions, when set, spreads the jobs over that many partitions
	// (their args' field "p"), each limited to perPartition at once
	// (--limit-partitions, --limit).
	partitions, perPartition int
	// sequence makes each partition a sequence (--limit-sequence): one
	// job at a time in insert order, a failed job holding it.
	sequence bool
	// jobDuration is how long each job's handler runs (--job-duration).
	jobDuration time.Duration
	// versus pairs each limited run with an unlimited one
	// (--versus-unlimited).
	versus bool
}

// addFlags registers the flags of l on fs.
func (l *limitBench) addFlags(fs *flag.FlagSet) {
	fs.IntVar(&l.concurrency, "limit-concurrency", 0, "burn-down and continuous: a concurrency limit of N on the bench's queue, fleet-wide (a pgqueue.Limit)")
	fs.IntVar(&l.partitions, "limit-partitions", 0, "burn-down and continuous: spread the jobs over P partitions (args field \"p\"), each limited to --limit at once")
	fs.IntVar(&l.perPartition, "limit", 1, "with --limit-partitions: each partition's concurrency limit")
	fs.BoolVar(&l.sequence, "limit-sequence", false, "with --limit-partitions: each partition is a sequence (a pgqueue.Limit with Sequence: one job at a time, in insert order)")
	fs.DurationVar(&l.jobDuration, "job-duration", 0, "how long each job's handler runs (0: a no-op)")
	fs.BoolVar(&l.versus, "versus-unlimited", false, "with a limit: pair each run with an unlimited one (the other going first in turn) and report each pair's ratio; "+
		"with --limit-concurrency N the unlimited run's worker runs at most N jobs at once, the same ceiling in one process")
}

// validate refuses limit flags the bench cannot honour.
func (l limitBench) validate(mode string, cfg benchConfig, set map[string]bool) error {
	if l.concurrency < 0 || l.partitions < 0 || l.perPartition < 1 || l.jobDuration < 0 {
		return fmt.Errorf("--limit-concurrency %d, --limit-partitions %d, --limit %d, --job-duration %s: want limits ≥ 0, --limit ≥ 1 and a duration ≥ 0",
			l.concurrency, l.partitions, l.perPartition, l.jobDuration)
	}
	if set["limit"] && l.partitions == 0 {
		return errors.New("--limit is each partition's limit: it needs --limit-partitions P")
	}
	if l.sequence && (l.partitions == 0 || l.perPartition != 1) {
		return errors.New("--limit-sequence makes each partition a sequence, which runs one job at a time: it needs --limit-partitions P and no --limit but 1")
	}
	if l.concurrency > 0 && l.partitions > 0 {
		return errors.New("--limit-concurrency and --limit-partitions are two kinds of limit: give one (a queue has one limit)")
	}
	if !l.limited() {
		if l.versus {
			return errors.New("--versus-unlimited compares a limited run with an unlimited one: it needs --limit-concurrency or --limit-partitions")
		}
		return nil
	}
	switch mode {
	case "burndown", "continuous", "both":
	default:
		return fmt.Errorf("--limit-concurrency and --limit-partitions are for --mode burndown or continuous, not --mode %s", mode)
	}
	if cfg.instances > 0 {
		return errors.New("--limit-concurrency and --limit-partitions run one worker in this process: leave out --instances")
	}
	if l.versus && set["versus-one"] {
		return errors.New("--versus-unlimited and --versus-one pair runs differently: give one")
	}
	return nil
}

func (l limitBench) limited() bool { return l.concurrency > 0 || l.partitions > 0 }

// unlimited is l without its limit: the same jobs, the same duration.
func (l limitBench) unlimited() limitBench {
	l.concurrency, l.versus, l.sequence = 0, false, false
	if l.partitions > 0 {
		// Keep the args' partition field: the same rows, unlimited.
		l.perPartition = 0
	}
	return l
}

// limit is the pgqueue.Limit the run sets.
func (l limitBench) limit() (pgqueue.Limit, bool) {
	switch {
	case l.concurrency > 0:
		return pgqueue.Limit{Name: "bench", Queue: queue.DefaultQueue, Concurrency: l.concurrency}, true
	case l.partitions > 0 && l.perPartition > 0:
		return pgqueue.Limit{Name: "bench", Queue: queue.DefaultQueue, PartitionBy: []string{"p"}, Concurrency: l.perPartition, Sequence: l.sequence}, true
	}
	return pgqueue.Limit{}, false
}

// ceiling is the rate the limit allows with jobs that run jobDuration,
// or 0 where it sets none.
func (l limitBench) ceiling() float64 {
	if l.jobDuration <= 0 {
		return 0
	}
	n := l.concurrency
	if l.partitions > 0 && l.perPartition > 0 {
		n = l.partitions * l.perPartition
	}
	return float64(n) / l.jobDuration.Seconds()
}

// args returns the args of the i-th job inserted.
func (l limitBench) args(i int) []byte {
	if l.partitions > 0 {
		return fmt.Appendf(nil, `{"n":1,"p":%d}`, i%l.partitions)
	}
	return []byte(`{"n":1}`)
}

// apply sets the run's limit through c, before its jobs are inserted.
func (l limitBench) apply(ctx context.Context, c *pgqueue.Client) error {
	lim, ok := l.limit()
	if !ok {
		return nil
	}
	if err := c.SetLimit(ctx, lim); err != nil {
		return fmt.Errorf("bench: set the limit: %w", err)
	}
	return nil
}

// register adds the bench's handler, which runs jobDuration.
func (l limitBench) register(reg *worker.Registry) {
	d := l.jobDuration
	worker.Add(reg, func(ctx context.Context, job *worker.Job[benchArgs]) error {
		if d <= 0 {
			return nil
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
}

// describe says what a run was limited by, for its result line.
func (l limitBench) describe() string {
	switch {
	case l.concurrency > 0:
		return fmt.Sprintf("limit %d at once", l.concurrency)
	case l.partitions > 0 && l.sequence:
		return fmt.Sprintf("%d sequences", l.partitions)
	case l.partitions > 0 && l.perPartition > 0:
		return fmt.Sprintf("%d partitions, limit %d each", l.partitions, l.perPartition)
	case l.partitions > 0:
		return fmt.Sprintf("unlimited, args over %d partitions", l.partitions)
	}
	return "unlimited"
}

// unlimitedConfig is cfg's unlimited counterpart for --versus-unlimited,
// and what its result line calls it. A global limit of N is paired with
// a worker that runs at most N jobs at once: the same ceiling, kept by
// one process instead of the database.
func (l limitBench) unlimitedConfig(cfg benchConfig) (benchConfig, string) {
	cfg.limits = l.unlimited()
	if l.concurrency > 0 {
		cfg.concurrency = min(cfg.concurrency, l.concurrency)
		return cfg, fmt.Sprintf("unlimited, the worker running %d at once", cfg.concurrency)
	}
	return cfg, "unlimited"
}

// limitsVersusLine compares limited runs with their unlimited pairs, and
// each side with the ceiling the limit allows where the jobs take time.
func limitsVersusLine(l limitBench, unlimited, limited []benchResult) string {
	n := min(len(unlimited), len(limited))
	unlimited, limited = unlimited[:n], limited[:n]
	rate := func(r benchResult) float64 {
		if w := r.warmRate(); w > 0 {
			return w
		}
		return r.rate
	}
	line := fmt.Sprintf("%s against unlimited (pairs: %d, rates after the warm-up where the runs outlasted it): ", l.describe(), n) +
		pairRatios(unlimited, limited, rate)
	if c := l.ceiling(); c > 0 {
		line += fmt.Sprintf("; of the %.0f jobs/s the limit allows with %s jobs: limited %.1f %%, unlimited %.1f %%",
			c, l.jobDuration, 100*median(figures(limited, rate))/c, 100*median(figures(unlimited, rate))/c)
	}
	return line
}
