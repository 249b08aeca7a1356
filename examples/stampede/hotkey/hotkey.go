// Package hotkey is the stampede scenario: 1,000 readers on 4 instances,
// each instance with its own Redis client and stampede.Guard, read one
// cold key at once. One reader per key computes the value under a Redis
// lock while the others wait for it: one computation. The lock is for
// efficiency only; if Redis fails, readers compute themselves.
package hotkey

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobfence/jobfence/examples/scenario"
	"github.com/jobfence/jobfence/stampede"
)

// Report is the expensive value.
type Report struct {
	Orders int `json:"orders"`
}

// Run plays the scenario on env and measures it.
func Run(ctx context.Context, env *scenario.Env) (scenario.Result, error) {
	var o scenario.Result
	opt, err := redis.ParseURL(env.RedisURL)
	if err != nil {
		return o, fmt.Errorf("REDIS_URL: %w", err)
	}
	// A prefix of the run's own: REDIS_URL may name a server in use.
	prefix := fmt.Sprintf("jobfence-example-%d:", time.Now().UnixNano())
	var computations, failed atomic.Int64
	compute := func(ctx context.Context) (Report, error) {
		computations.Add(1)
		time.Sleep(200 * time.Millisecond) // a slow query
		return Report{Orders: 1200}, nil
	}
	const instances, readers = 4, 250
	env.Logf("%d readers on %d instances read the cold key report:daily at once", instances*readers, instances)
	var wg sync.WaitGroup
	for range instances {
		client := redis.NewClient(opt)
		defer client.Close()
		guard, err := stampede.New[Report](client, stampede.Options{Prefix: prefix, Logger: env.Log()})
		if err != nil {
			return o, err
		}
		for range readers {
			wg.Go(func() {
				r, err := guard.Get(ctx, "report:daily", time.Minute, compute)
				if err != nil || r.Orders != 1200 {
					failed.Add(1)
				}
			})
		}
	}
	wg.Wait()
	o.Attempted = instances * readers
	o.Effects, o.WantEffects = computations.Load(), 1
	o.Rejected = o.Attempted - failed.Load() - o.Effects
	if n := failed.Load(); n > 0 {
		o.Problems = append(o.Problems, fmt.Sprintf("%d reads failed", n))
	}
	env.Logf("%d reads, %d computation(s), %d readers served the computed value", o.Attempted, o.Effects, o.Rejected)
	return o, nil
}
