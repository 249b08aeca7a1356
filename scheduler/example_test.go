package scheduler_test

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/scheduler"
)

// ReportArgs are the arguments of a nightly report job.
type ReportArgs struct {
	Format string `json:"format"`
}

// Kind implements queue.Args.
func (ReportArgs) Kind() string { return "nightly_report" }

// Every instance of a service runs the same code: each fire becomes one job
// for the whole fleet.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	s := scheduler.New(pgqueue.New(pool, pgqueue.Config{}), scheduler.Config{})
	// 03:00 in Paris, whatever the hosts' zones; after downtime, run the
	// latest missed report once.
	if err := s.AddArgs("nightly-report", "0 3 * * *", ReportArgs{Format: "pdf"}, scheduler.Options{
		TimeZone: "Europe/Paris",
		CatchUp:  scheduler.CatchUpLatest,
	}); err != nil {
		log.Fatal(err)
	}
	// Every 90 s, counted from the Unix epoch; skipped while the last one runs.
	if err := s.Add("sync-inventory", "@every 90s", "sync_inventory", nil, scheduler.Options{SkipIfRunning: true}); err != nil {
		log.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer s.Stop(ctx)
	// ... serve; workers run the jobs.
}
