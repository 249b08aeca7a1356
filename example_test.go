package jobfence_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence"
	"github.com/jobfence/jobfence/jobfencetest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/scheduler"
	"github.com/jobfence/jobfence/telemetry"
)

// SendInvoice is a job's typed arguments.
type SendInvoice struct {
	InvoiceID int64 `json:"invoice_id"`
}

// Kind names the handler that runs SendInvoice jobs.
func (SendInvoice) Kind() string { return "send_invoice" }

// PurgeSessions are the arguments of a periodic job.
type PurgeSessions struct{}

// Kind names the handler that runs PurgeSessions jobs.
func (PurgeSessions) Kind() string { return "purge_sessions" }

// openExampleDB gives each example a migrated schema of its own on the
// server that TestMain started; a service opens its pool with
// pgxpool.New(ctx, os.Getenv("DATABASE_URL")) after `jobfence migrate up`.
func openExampleDB(ctx context.Context) *jobfencetest.DB {
	db, err := jobfencetest.OpenDB(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	return db
}

// Example is a service's whole use of jobfence: one client that inserts,
// works its queue, and stops gracefully.
func Example() {
	ctx := context.Background()
	db := openExampleDB(ctx)
	defer db.Close()

	sent := make(chan struct{})
	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[SendInvoice]) error {
		// job.IdempotencyKey() is the same on every attempt: hand it to
		// the mail or payment provider so a retry cannot act twice.
		fmt.Println("sending invoice", job.Args.InvoiceID, "attempt", job.Attempt)
		close(sent)
		return nil
	})
	client, err := jobfence.NewClient(db.Pool, jobfence.Config{
		Queues:   map[string]int{"default": 10},
		Handlers: reg,
	})
	if err != nil {
		log.Fatal(err)
	}

	// Any client inserts, started or not: the job waits for a worker.
	res, err := client.Insert(ctx, SendInvoice{InvoiceID: 42}, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("inserted:", res.Inserted)

	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	select { // a service waits for SIGTERM here
	case <-sent:
	case <-time.After(time.Minute):
		fmt.Println("the job did not run")
	}

	// Running jobs finish; those still running at the deadline are put back.
	stopCtx, cancel := context.WithTimeout(ctx, 25*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("stopped")
	// Output:
	// inserted: true
	// sending invoice 42 attempt 1
	// stopped
}

// ExampleSchedule runs a periodic job. Every instance of a service
// configures the same schedules; each fire becomes one job for the whole
// fleet, with no leader.
func ExampleSchedule() {
	ctx := context.Background()
	db := openExampleDB(ctx)
	defer db.Close()

	ran := make(chan time.Time, 1)
	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[PurgeSessions]) error {
		select {
		case ran <- job.ScheduledAt: // the fire's time
		default:
		}
		return nil
	})
	client, err := jobfence.NewClient(db.Pool, jobfence.Config{
		Queues:   map[string]int{"maintenance": 1},
		Handlers: reg,
		Schedules: []jobfence.Schedule{{
			Name: "purge-sessions",
			Spec: "@every 1s", // in a service: "0 3 * * *", in Options.TimeZone
			Args: PurgeSessions{},
			Options: scheduler.Options{
				Queue:   "maintenance",
				CatchUp: scheduler.CatchUpLatest, // after downtime, run the latest missed fire once
			},
		}},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	select {
	case at := <-ran:
		fmt.Println("purged for a fire on the second:", at.Equal(at.Truncate(time.Second)))
	case <-time.After(time.Minute):
		fmt.Println("no fire ran")
	}

	// Stop stops the scheduler too: no fire is enqueued after it returns.
	if err := client.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("stopped")
	// Output:
	// purged for a fire on the second: true
	// stopped
}

// ExampleClient_InsertTx writes a row and its job in one transaction:
// both exist, or neither does.
func ExampleClient_InsertTx() {
	ctx := context.Background()
	db := openExampleDB(ctx)
	defer db.Close()
	client, err := jobfence.NewClient(db.Pool, jobfence.Config{}) // insert-only
	if err != nil {
		log.Fatal(err)
	}

	var id int64
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	res, err := client.InsertTx(ctx, tx, SendInvoice{InvoiceID: 1}, nil)
	if err != nil {
		log.Fatal(err)
	}
	_ = tx.Rollback(ctx) // the invoice was not created after all
	_, err = client.Get(ctx, res.ID)
	fmt.Println("rolled back, job found:", !errors.Is(err, queue.ErrJobNotFound))

	err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		// ... INSERT INTO invoices ...
		res, err := client.InsertTx(ctx, tx, SendInvoice{InvoiceID: 2}, nil)
		id = res.ID
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	job, err := client.Get(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("committed, job is", job.State)
	// Output:
	// rolled back, job found: false
	// committed, job is available
}

// ExampleConfig_telemetry instruments the client's inserts, worker and
// scheduler with one field: metrics, producer and consumer spans, and
// trace ids in the worker's logs, reported to the global OpenTelemetry
// providers (install the SDK in main for them to record anything).
func ExampleConfig_telemetry() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[SendInvoice]) error { return nil })
	client, err := jobfence.NewClient(pool, jobfence.Config{
		Queues:    map[string]int{"default": 50},
		Handlers:  reg,
		Telemetry: telemetry.Options{},
	})
	if err != nil {
		log.Fatal(err)
	}
	_ = client // client.Start(ctx) ... client.Stop(ctx)
}
