// Command stampede shows a cold cache key read by 1,000 concurrent callers,
// spread over 4 service instances, being computed once. It needs nothing set
// up: without REDIS_URL it starts a throwaway redis-server.
//
//	go run ./examples/stampede
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobfence/jobfence/jobfencetest/devserver"
	"github.com/jobfence/jobfence/stampede"
)

// Report is an expensive value many requests want at once.
type Report struct {
	Orders  int
	Revenue int64
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		log.Print(err)
		stop()
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	env, err := devserver.Start(ctx, devserver.Options{Redis: true})
	if err != nil {
		return err
	}
	defer env.Close()
	opt, err := redis.ParseURL(env.RedisURL)
	if err != nil {
		return err
	}
	// A prefix of its own, so that every run starts with a cold key.
	prefix := fmt.Sprintf("example-stampede-%d:", time.Now().UnixNano())

	var computations atomic.Int64
	dailyReport := func(ctx context.Context) (Report, error) {
		computations.Add(1)
		time.Sleep(200 * time.Millisecond) // a slow query
		return Report{Orders: 1200, Revenue: 98_765_00}, nil
	}

	const instances, readers = 4, 250 // 1,000 readers in all
	var (
		wg     sync.WaitGroup
		failed atomic.Int64
	)
	for range instances {
		// Each instance has its own Redis client and Guard, as separate
		// processes would.
		client := redis.NewClient(opt)
		defer client.Close()
		guard, err := stampede.New[Report](client, stampede.Options{Prefix: prefix})
		if err != nil {
			return err
		}
		for range readers {
			wg.Go(func() {
				r, err := guard.Get(ctx, "report:daily", time.Minute, dailyReport)
				if err != nil || r.Orders != 1200 {
					failed.Add(1)
				}
			})
		}
	}
	wg.Wait()

	fmt.Printf("%d readers on %d instances: %d computation(s), %d failed reads\n",
		instances*readers, instances, computations.Load(), failed.Load())
	if computations.Load() != 1 || failed.Load() != 0 {
		return fmt.Errorf("want exactly 1 computation and no failed reads")
	}
	return nil
}
