package jobfence_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/jobfence/jobfence"
	"github.com/jobfence/jobfence/workflow"
)

// ChargeCard and ShipOrder are the tasks of an order's workflow.
type ChargeCard struct {
	OrderID int64 `json:"order_id"`
}

// Kind names the handler that runs ChargeCard jobs.
func (ChargeCard) Kind() string { return "charge_card" }

// ShipOrder ships an order once its card is charged.
type ShipOrder struct {
	OrderID int64 `json:"order_id"`
}

// Kind names the handler that runs ShipOrder jobs.
func (ShipOrder) Kind() string { return "ship_order" }

// ExampleClient_InsertWorkflow inserts a workflow whose second task runs
// once the first has completed, then reads it back and cancels it.
func ExampleClient_InsertWorkflow() {
	ctx := context.Background()
	db := openExampleDB(ctx)
	defer db.Close()
	client, err := jobfence.NewClient(db.Pool, jobfence.Config{}) // insert-only: workers elsewhere run the tasks
	if err != nil {
		log.Fatal(err)
	}

	res, err := client.InsertWorkflow(ctx, workflow.New("order 7").
		Add("charge", ChargeCard{OrderID: 7}, nil).
		Add("ship", ShipOrder{OrderID: 7}, &workflow.TaskOpts{DependsOn: []string{"charge"}}))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("tasks:", len(res.Tasks))

	wf, err := client.Workflows().Get(ctx, res.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(wf.Name+":", wf.Counts["available"], "available,", wf.Counts["pending"], "pending")

	n, err := client.Workflows().Cancel(ctx, res.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("cancelled:", n)

	_, err = client.Workflows().Get(ctx, "00000000-0000-0000-0000-000000000000")
	fmt.Println(errors.Is(err, jobfence.ErrWorkflowNotFound))
	// Output:
	// tasks: 2
	// order 7: 1 available, 1 pending
	// cancelled: 2
	// true
}

// ExampleClient_Limits caps the calls to a provider across the fleet:
// 5 at once, 50 a second. Every instance obeys the limit, which is stored
// in the database.
func ExampleClient_Limits() {
	ctx := context.Background()
	db := openExampleDB(ctx)
	defer db.Close()
	client, err := jobfence.NewClient(db.Pool, jobfence.Config{})
	if err != nil {
		log.Fatal(err)
	}

	err = client.Limits().Set(ctx, jobfence.Limit{
		Name: "provider", Queue: "provider", Concurrency: 5, Rate: 50, Period: time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	limits, err := client.Limits().List(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, l := range limits {
		fmt.Printf("%s: %d at once, %d per %s, failed jobs: %s\n", l.Name, l.Concurrency, l.Rate, l.Period, l.OnFailure)
	}

	// A limit it cannot use says which field is wrong.
	err = client.Limits().Set(ctx, jobfence.Limit{Name: "no-queue", Concurrency: 1})
	var bad *jobfence.InvalidLimitError
	fmt.Println(errors.As(err, &bad), bad.Field)
	// Output:
	// provider: 5 at once, 50 per 1s, failed jobs: release
	// true Queue
}

// ExampleClient_Schedules changes the fleet's schedules from a process
// that runs no scheduler (an API server, an admin tool): the instances
// that fire them pick each change up within seconds.
func ExampleClient_Schedules() {
	ctx := context.Background()
	db := openExampleDB(ctx)
	defer db.Close()
	client, err := jobfence.NewClient(db.Pool, jobfence.Config{}) // insert-only
	if err != nil {
		log.Fatal(err)
	}
	schedules := client.Schedules()

	created, err := schedules.Put(ctx, "purge-sessions", "0 3 * * *", PurgeSessions{}, jobfence.ScheduleOptions{TimeZone: "Europe/Paris"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("created:", created)

	paused, err := schedules.Pause(ctx, "purge-sessions", "ada@ops")
	if err != nil {
		log.Fatal(err)
	}
	again, err := schedules.Pause(ctx, "purge-sessions", "ada@ops")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("paused:", paused, "paused again:", again) // the second found it paused already

	fire, err := schedules.Trigger(ctx, "purge-sessions") // "run now", paused or not
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("triggered a job:", fire.Inserted)

	info, err := schedules.Get(ctx, "purge-sessions")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(info.Name, info.Spec, info.TimeZone, "paused by", info.PausedBy)

	if err := schedules.Delete(ctx, "purge-sessions"); err != nil {
		log.Fatal(err)
	}
	_, err = schedules.Resume(ctx, "purge-sessions")
	fmt.Println(errors.Is(err, jobfence.ErrScheduleNotFound))
	// Output:
	// created: true
	// paused: true paused again: false
	// triggered a job: true
	// purge-sessions 0 3 * * * Europe/Paris paused by ada@ops
	// true
}

// ExampleClient_Queues pauses a queue for the whole fleet, from any
// client: no worker claims its jobs until it is resumed.
func ExampleClient_Queues() {
	ctx := context.Background()
	db := openExampleDB(ctx)
	defer db.Close()
	client, err := jobfence.NewClient(db.Pool, jobfence.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.Insert(ctx, SendInvoice{InvoiceID: 1}, &jobfence.InsertOpts{Queue: "mail"}); err != nil {
		log.Fatal(err)
	}
	if err := client.Queues().Pause(ctx, "mail", "ada@ops"); err != nil {
		log.Fatal(err)
	}
	queues, err := client.Queues().List(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, q := range queues {
		fmt.Println(q.Name, "paused:", q.Paused, "by", q.PausedBy, "available:", q.Count("available"))
	}
	if err := client.Queues().Resume(ctx, "mail", "ada@ops"); err != nil {
		log.Fatal(err)
	}
	// Output:
	// mail paused: true by ada@ops available: 1
}

// ExamplePoolConfig sizes the pool of a client that works 50 jobs at once
// in "default" and 10 in "mail": one connection per job that may hold one
// (a transactional handler), and 2 for heartbeats, claims and outcomes.
func ExamplePoolConfig() {
	queues := map[string]int{"default": 50, "mail": 10}
	cfg, err := jobfence.PoolConfig("postgres://app@db.internal:5432/app", queues) // os.Getenv("DATABASE_URL")
	if err != nil {
		log.Fatal(err)
	}
	// Then: pool, err := pgxpool.NewWithConfig(ctx, cfg), and
	// jobfence.NewClient(pool, jobfence.Config{Queues: queues, ...}).
	fmt.Println("MaxConns:", cfg.MaxConns)
	// Output:
	// MaxConns: 62
}
