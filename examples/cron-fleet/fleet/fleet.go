// Package fleet is the cron-fleet scenario: 20 scheduler instances, each
// with its own connection pool as separate hosts would have, register the
// same per-second schedule. Every instance enqueues every fire under the
// unique key cron:<name>:<fire time>, and only the first insert wins: one
// job per fire, with no leader and no lock.
package fleet

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/examples/scenario"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/scheduler"
)

const (
	instances = 20
	fires     = 3
)

const countJobsSQL = `SELECT count(*) FROM jobfence_jobs WHERE starts_with(unique_key, $1)`

// Run plays the scenario on env and measures it.
func Run(ctx context.Context, env *scenario.Env) (scenario.Result, error) {
	var o scenario.Result
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
	var pools []*pgxpool.Pool
	// The schedulers stop before their pools close: a scheduler whose
	// pool closed first would log failed fires until it stopped.
	defer func() {
		for _, s := range fleet {
			stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			s.Stop(stopCtx)
			cancel()
		}
		for _, p := range pools {
			p.Close()
		}
	}()
	for range instances {
		pool, err := env.NewPool(ctx, 2)
		if err != nil {
			return o, err
		}
		pools = append(pools, pool)
		s := scheduler.New(pgqueue.New(pool, pgqueue.Config{Logger: env.Log()}), scheduler.Config{Logger: env.Log(), OnFire: onFire})
		if err := s.Add(name, "* * * * * *", "heartbeat", map[string]string{"from": "cron-fleet"}, scheduler.Options{}); err != nil {
			return o, err
		}
		if err := s.Start(ctx); err != nil {
			return o, err
		}
		fleet = append(fleet, s)
	}
	env.Logf("%d instances run schedule %q every second; waiting for %d fires", instances, name, fires)
	// A fire counts once every instance handled it, so that each fire's
	// attempts are all in.
	err := scenario.WaitUntil(ctx, time.Minute, "fires handled by every instance", func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		done := 0
		for _, n := range handled {
			if n == instances {
				done++
			}
		}
		return done >= fires, nil
	})
	if err != nil {
		return o, err
	}
	for _, s := range fleet {
		if err := s.Stop(ctx); err != nil {
			return o, err
		}
	}
	fleet = nil
	if err := env.Pool.QueryRow(ctx, countJobsSQL, "cron:"+name+":").Scan(&o.Effects); err != nil {
		return o, err
	}
	mu.Lock()
	defer mu.Unlock()
	for _, at := range slices.SortedFunc(maps.Keys(handled), time.Time.Compare) {
		o.Attempted += int64(handled[at])
		env.Logf("fire %s: handled by %d instances, inserted by %d", at.Format(time.TimeOnly), handled[at], inserted[at])
		if inserted[at] != 1 {
			o.Problems = append(o.Problems, fmt.Sprintf("fire %s inserted %d times", at.Format(time.TimeOnly), inserted[at]))
		}
	}
	o.WantEffects = int64(len(handled))
	o.Rejected = o.Attempted - o.Effects
	env.Logf("%d fires, %d enqueue attempts, %d jobs", len(handled), o.Attempted, o.Effects)
	return o, nil
}
