// Command cron-fleet shows a cron job deployed on 20 instances firing once
// per tick. It runs 20 scheduler instances in one process, each with its own
// connection pool as separate hosts would have, all registering the same
// per-second schedule, for five fires. It prints the fires and the jobs
// enqueued, which must be equal, and exits 1 otherwise.
//
// It uses the PostgreSQL that DATABASE_URL names, or starts a throwaway one.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/jobfencetest/devserver"
	"github.com/jobfence/jobfence/migrations"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/scheduler"
)

const (
	instances = 20
	fires     = 5
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "cron-fleet:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	env, err := devserver.Start(ctx, devserver.Options{Postgres: true})
	if err != nil {
		return err
	}
	defer env.Close()
	if err := migrations.Up(ctx, env.DatabaseURL); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	// A name of its own, so a shared database's other jobs are not counted.
	name := fmt.Sprintf("cron-fleet-%d", time.Now().UnixNano())

	var mu sync.Mutex
	handled := map[time.Time]int{}  // fire -> instances that handled it
	inserted := map[time.Time]int{} // fire -> instances that inserted its job
	onFire := func(f scheduler.Fire) {
		mu.Lock()
		defer mu.Unlock()
		handled[f.At]++
		if f.Inserted {
			inserted[f.At]++
		}
	}

	var fleet []*scheduler.Scheduler
	for range instances {
		pool, err := pgxpool.New(ctx, env.DatabaseURL)
		if err != nil {
			return err
		}
		defer pool.Close()
		s := scheduler.New(pgqueue.New(pool, pgqueue.Config{Logger: logger}), scheduler.Config{Logger: logger, OnFire: onFire})
		if err := s.Add(name, "* * * * * *", "heartbeat", map[string]string{"from": "cron-fleet"}, scheduler.Options{}); err != nil {
			return err
		}
		if err := s.Start(ctx); err != nil {
			return err
		}
		fleet = append(fleet, s)
	}
	fmt.Printf("%d instances running schedule %q every second; waiting for %d fires\n", instances, name, fires)

	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		n := len(handled)
		mu.Unlock()
		if n >= fires {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d fires in a minute", n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	for _, s := range fleet {
		if err := s.Stop(ctx); err != nil {
			return err
		}
	}

	pool, err := pgxpool.New(ctx, env.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	var jobs int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE starts_with(unique_key, $1)`,
		"cron:"+name+":").Scan(&jobs); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	ok := jobs == len(handled)
	for _, at := range slices.SortedFunc(maps.Keys(handled), time.Time.Compare) {
		fmt.Printf("fire %s: handled by %2d instances, inserted by %d\n", at.Format(time.TimeOnly), handled[at], inserted[at])
		ok = ok && inserted[at] == 1
	}
	fmt.Printf("fires: %d, jobs enqueued: %d\n", len(handled), jobs)
	if !ok {
		return fmt.Errorf("want one job per fire")
	}
	fmt.Println("one job per fire")
	return nil
}
