// Package provider is the rate-limited-provider scenario: a provider that
// allows 5 concurrent calls and 50 a second is called from a fleet of 10
// workers, each with its own connection pool as separate hosts would
// have. One limit in the database (Concurrency 5, Rate 50 per second)
// governs the queue of calls, so no worker needs to know of the others:
// the provider is never overrun, and every call is made once.
package provider

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/examples/scenario"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// What the provider allows, and the scenario's size.
const (
	maxConcurrent = 5
	maxPerSecond  = 50
	workers       = 10
	calls         = 150
)

// Call is one call to the provider.
type Call struct {
	N int `json:"n"`
}

// Kind implements queue.Args.
func (Call) Kind() string { return "provider_call" }

// fakeProvider counts the calls in flight and the most it saw at once.
type fakeProvider struct {
	mu             sync.Mutex
	inFlight, most int
	made           int
}

func (p *fakeProvider) call(ctx context.Context) error {
	p.mu.Lock()
	p.inFlight++
	p.made++
	p.most = max(p.most, p.inFlight)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.inFlight--
		p.mu.Unlock()
	}()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(30 * time.Millisecond):
		return nil
	}
}

// startsSQL is the calls' starts, by their claims' times (what the rate
// limit counts), from both tables a job can be in: a completed job moves
// from jobfence_jobs to jobfence_jobs_finished once the workers have made
// that table's partitions. Jobs a limit governs, as these are, complete in
// place; reading both keeps the query right for a queue without a limit.
const startsSQL = `WITH starts AS (
    SELECT attempted_at FROM jobfence_jobs WHERE queue = 'provider' AND attempted_at IS NOT NULL
    UNION ALL
    SELECT attempted_at FROM jobfence_jobs_finished WHERE queue = 'provider' AND attempted_at IS NOT NULL
)`

// mostStartsSQL is the most calls started within any second: for each
// start, the starts in the second from it.
const mostStartsSQL = startsSQL + `
SELECT coalesce(max((SELECT count(*) FROM starts b
    WHERE b.attempted_at >= a.attempted_at AND b.attempted_at < a.attempted_at + interval '1 second')), 0)
FROM starts a`

// spanSQL is the time from the first call's start to the last's.
const spanSQL = startsSQL + `
SELECT coalesce(max(attempted_at) - min(attempted_at), '0'::interval) FROM starts`

// Run plays the scenario on env and measures it.
func Run(ctx context.Context, env *scenario.Env) (scenario.Result, error) {
	var o scenario.Result
	jobs := pgqueue.New(env.Pool, pgqueue.Config{Logger: env.Log()})
	if err := jobs.SetLimit(ctx, pgqueue.Limit{
		Name: "provider", Queue: "provider", Concurrency: maxConcurrent, Rate: maxPerSecond, Period: time.Second,
	}); err != nil {
		return o, err
	}
	p := &fakeProvider{}
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[Call]) error { return p.call(ctx) })
	var fleet []*worker.Worker
	var pools []*pgxpool.Pool
	// The workers stop before their pools close: a worker whose pool
	// closed first would log failed claims until it stopped.
	defer func() {
		for _, w := range fleet {
			stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			w.Stop(stopCtx)
			cancel()
		}
		for _, p := range pools {
			p.Close()
		}
	}()
	for range workers {
		pool, err := env.NewPool(ctx, 4)
		if err != nil {
			return o, err
		}
		pools = append(pools, pool)
		w, err := worker.New(pgqueue.New(pool, pgqueue.Config{Logger: env.Log()}), reg, worker.Config{
			Queues: map[string]int{"provider": 10}, PromoteInterval: 200 * time.Millisecond, Logger: env.Log(),
		})
		if err != nil {
			return o, err
		}
		if err := w.Start(ctx); err != nil {
			return o, err
		}
		fleet = append(fleet, w)
	}
	var ps []queue.EnqueueParams
	for i := range calls {
		params, err := queue.Params(Call{N: i}, &queue.InsertOpts{Queue: "provider"})
		if err != nil {
			return o, err
		}
		ps = append(ps, params)
	}
	if _, err := jobs.EnqueueMany(ctx, ps); err != nil {
		return o, err
	}
	env.Logf("%d calls enqueued for %d workers; the provider allows %d at once and %d a second", calls, workers, maxConcurrent, maxPerSecond)
	// Counts reads both tables a completed job can be in.
	err := scenario.WaitUntil(ctx, 2*time.Minute, "every call made", func() (bool, error) {
		counts, err := jobs.Counts(ctx, "provider")
		o.Effects = counts[queue.StateCompleted]
		return o.Effects == calls, err
	})
	if err != nil {
		return o, err
	}
	var most int
	if err := env.Pool.QueryRow(ctx, mostStartsSQL).Scan(&most); err != nil {
		return o, err
	}
	var span time.Duration
	if err := env.Pool.QueryRow(ctx, spanSQL).Scan(&span); err != nil {
		return o, err
	}
	if span > 0 {
		// The first window's starts come at once; the rest as the
		// window frees slots: that is the rate the fleet sustains.
		env.Logf("the calls started over %.2fs: after the first second's %d, %.1f a second (the provider allows %d)",
			span.Seconds(), maxPerSecond, float64(calls-maxPerSecond)/span.Seconds(), maxPerSecond)
	}
	p.mu.Lock()
	o.Attempted, o.WantEffects = int64(p.made), calls
	if p.most > maxConcurrent {
		o.Problems = append(o.Problems, fmt.Sprintf("%d calls at once, the provider allows %d", p.most, maxConcurrent))
	}
	env.Logf("the provider saw at most %d calls at once and %d started within a second", p.most, most)
	p.mu.Unlock()
	if most > maxPerSecond {
		o.Problems = append(o.Problems, fmt.Sprintf("%d calls started within a second, the provider allows %d", most, maxPerSecond))
	}
	return o, nil
}
