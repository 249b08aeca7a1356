package stampede_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobfence/jobfence/stampede"
)

type Report struct {
	Orders int
	Total  int64
}

// A hundred concurrent readers of a cold key cause one computation.
func Example() {
	ctx := context.Background()
	opt, err := redis.ParseURL(os.Getenv("REDIS_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	client := redis.NewClient(opt)
	defer client.Close()

	guard, err := stampede.New[Report](client, stampede.Options{
		Prefix: fmt.Sprintf("example-%d:", time.Now().UnixNano()),
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	var computations atomic.Int64
	dailyReport := func(ctx context.Context) (Report, error) {
		computations.Add(1)
		time.Sleep(20 * time.Millisecond) // an expensive query
		return Report{Orders: 1200, Total: 98_765}, nil
	}

	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			r, err := guard.Get(ctx, "report:daily", time.Minute, dailyReport)
			if err != nil || r.Orders != 1200 {
				fmt.Println("unexpected:", r, err)
			}
		})
	}
	wg.Wait()
	fmt.Println("computations:", computations.Load())
	// Output: computations: 1
}
