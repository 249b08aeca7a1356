package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobfence/jobfence/stampede"
)

// report is the expensive value of scenario 7.
type report struct {
	Orders int `json:"orders"`
}

// demoStampede is scenario 7: 1,000 readers on 4 instances, each instance
// with its own Redis client and Guard, read one cold key at once; the value
// is computed once.
func demoStampede(ctx context.Context, d *demo, p progress) (outcome, error) {
	var o outcome
	opt, err := redis.ParseURL(d.redisURL)
	if err != nil {
		return o, fmt.Errorf("REDIS_URL: %w", err)
	}
	prefix := fmt.Sprintf("jobfence-demo-%d:", time.Now().UnixNano())
	var computations, failed atomic.Int64
	compute := func(ctx context.Context) (report, error) {
		computations.Add(1)
		time.Sleep(200 * time.Millisecond) // a slow query
		return report{Orders: 1200}, nil
	}
	const instances, readers = 4, 250
	p("%d readers on %d instances read the cold key report:daily at once", instances*readers, instances)
	var wg sync.WaitGroup
	for range instances {
		client := redis.NewClient(opt)
		defer client.Close()
		guard, err := stampede.New[report](client, stampede.Options{Prefix: prefix, Logger: d.log})
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
	p("%d reads, %d computation(s), %d readers served the computed value", o.Attempted, o.Effects, o.Rejected)
	return o, nil
}
