package scheduler_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jobfence/jobfence/jobfencetest"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/scheduler"
)

// Three instances register the same schedule; each fire becomes one job.
func Example_onePerFire() {
	ctx := context.Background()
	db, err := jobfencetest.OpenDB(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()

	var instances []*scheduler.Scheduler
	for range 3 {
		s := scheduler.New(pgqueue.New(db.Pool, pgqueue.Config{}), scheduler.Config{Logger: slog.New(slog.DiscardHandler)})
		if err := s.Add("tick", "@every 1s", "tick", nil, scheduler.Options{}); err != nil {
			fmt.Println(err)
			return
		}
		if err := s.Start(ctx); err != nil {
			fmt.Println(err)
			return
		}
		instances = append(instances, s)
	}
	count := func() (fires, jobs int) {
		db.Pool.QueryRow(ctx, `SELECT count(DISTINCT unique_key), count(*) FROM jobfence_jobs WHERE kind = 'tick'`).Scan(&fires, &jobs)
		return fires, jobs
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if fires, _ := count(); fires >= 2 {
			break
		}
	}
	for _, s := range instances {
		s.Stop(ctx)
	}
	fires, jobs := count()
	fmt.Println("fires:", fires >= 2, "one job each:", fires == jobs)
	// Output: fires: true one job each: true
}
