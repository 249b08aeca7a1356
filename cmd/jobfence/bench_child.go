package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// benchChildStatsEvery is how often a bench worker process reports its
// counters.
const benchChildStatsEvery = 100 * time.Millisecond

// runBenchChild is one worker process of `jobfence bench --instances N`: a
// worker with a pool of its own at DATABASE_URL, running no-op bench jobs.
// It prints "stats <completed> <stale> <errors>" every 100ms, and once its
// stdin closes it stops the worker, prints the final stats line and exits.
func runBenchChild(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench-proc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg benchConfig
	fs.IntVar(&cfg.concurrency, "concurrency", 2000, "jobs run at once")
	fs.IntVar(&cfg.fetchers, "fetchers", 0, "claim loops per queue")
	fs.IntVar(&cfg.fetchLimit, "fetch-limit", 0, "jobs per claim")
	fs.IntVar(&cfg.completers, "completers", 0, "outcome batches in flight")
	fs.IntVar(&cfg.conns, "conns", benchWorkerConns, "the pool's connections")
	pollOnly := fs.Bool("poll-only", false, "no LISTEN (behind PgBouncer)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: bench-proc [flags] (it is run by jobfence bench --instances N, with DATABASE_URL set)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return errors.New("DATABASE_URL is not set")
	}
	pool, err := newBenchPool(ctx, url, int32(cfg.conns))
	if err != nil {
		return err
	}
	defer pool.Close()
	quiet := slog.New(slog.DiscardHandler)
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[benchArgs]) error { return nil })
	w, err := worker.New(pgqueue.New(pool, pgqueue.Config{Logger: quiet, PollOnly: *pollOnly}), reg, benchWorkerConfig(fmt.Sprint("bench-", os.Getpid()), cfg, quiet))
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	report := func() {
		s := w.Stats()
		fmt.Fprintf(stdout, "stats %d %d %d\n", s.Completed, s.Stale, s.FetchErrors+s.FinishErrors)
	}
	eof := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, bufio.NewReader(os.Stdin))
		close(eof)
	}()
	tick := time.NewTicker(benchChildStatsEvery)
	defer tick.Stop()
	for running := true; running; {
		select {
		case <-tick.C:
			report()
		case <-eof:
			running = false
		case <-ctx.Done():
			running = false
		}
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = w.Stop(stopCtx)
	report()
	return err
}

// benchWorkerConfig is the worker configuration of every bench instance,
// in-process or a process of its own.
func benchWorkerConfig(id string, cfg benchConfig, log *slog.Logger) worker.Config {
	return worker.Config{
		ID: id, Queues: map[string]int{queue.DefaultQueue: cfg.concurrency},
		Logger: log, DisableMaintenance: true,
		Fetchers: cfg.fetchers, FetchLimit: cfg.fetchLimit, Completers: cfg.completers,
	}
}
