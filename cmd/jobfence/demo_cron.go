package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/scheduler"
)

const (
	cronInstances = 20
	cronFires     = 3
)

const countCronJobsSQL = `SELECT count(*) FROM jobfence_jobs WHERE starts_with(unique_key, $1)`

// demoCron is scenario 1: 20 scheduler instances, each with its own pool as
// separate hosts would have, run one per-second schedule; every fire must be
// one job.
func demoCron(ctx context.Context, d *demo, p progress) (outcome, error) {
	var o outcome
	name := fmt.Sprintf("demo-cron-%d", time.Now().UnixNano())
	var mu sync.Mutex
	handled := map[time.Time]int{}
	inserted := map[time.Time]int{}
	onFire := func(f scheduler.Fire) {
		mu.Lock()
		defer mu.Unlock()
		handled[f.At]++
		if f.Inserted {
			inserted[f.At]++
		}
	}
	var fleet []*scheduler.Scheduler
	defer func() {
		for _, s := range fleet {
			stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			s.Stop(stopCtx)
			cancel()
		}
	}()
	for range cronInstances {
		pool, err := newDemoPool(ctx, d, 2)
		if err != nil {
			return o, err
		}
		defer pool.Close()
		s := scheduler.New(pgqueue.New(pool, pgqueue.Config{Logger: d.log}), scheduler.Config{Logger: d.log, OnFire: onFire})
		if err := s.Add(name, "* * * * * *", "heartbeat", map[string]string{"from": "demo"}, scheduler.Options{}); err != nil {
			return o, err
		}
		if err := s.Start(ctx); err != nil {
			return o, err
		}
		fleet = append(fleet, s)
	}
	p("%d instances run schedule %q every second; waiting for %d fires", cronInstances, name, cronFires)
	// A fire counts once every instance handled it, so that each fire's
	// attempts are all in.
	err := waitUntil(ctx, time.Minute, "fires handled by every instance", func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		done := 0
		for _, n := range handled {
			if n == cronInstances {
				done++
			}
		}
		return done >= cronFires, nil
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
	if err := d.pool.QueryRow(ctx, countCronJobsSQL, "cron:"+name+":").Scan(&o.Effects); err != nil {
		return o, err
	}
	mu.Lock()
	defer mu.Unlock()
	for at, n := range handled {
		o.Attempted += int64(n)
		if inserted[at] != 1 {
			o.Problems = append(o.Problems, fmt.Sprintf("fire %s inserted %d times", at.Format(time.TimeOnly), inserted[at]))
		}
	}
	o.WantEffects = int64(len(handled))
	o.Rejected = o.Attempted - o.Effects
	p("%d fires, %d enqueue attempts, %d jobs", len(handled), o.Attempted, o.Effects)
	return o, nil
}
