// Package billing is a notifications and billing service written against
// one jobfence.Client: invoices run one at a time per customer in the
// order they were raised (a sequence), notifications keep under their
// provider's rate per customer and wait out its 429s (an adaptive rate
// limit) and are dropped when late (a deadline), an order is a workflow
// whose refund runs only if shipping failed (a compensation reading the
// charge's output), and a nightly summary is a schedule any instance, an
// insert-only API process included, can pause or trigger.
package billing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence"
	"github.com/jobfence/jobfence/workflow"
)

// Queues are the queues the service works, with each one's concurrency on
// an instance; size the pool with jobfence.PoolConfig(url, Queues).
var Queues = map[string]int{"billing": 4, "notify": 4, "orders": 4}

// Invoice raises invoice Number of Customer.
type Invoice struct {
	Customer string `json:"customer"`
	Number   int    `json:"number"`
}

// Kind names the invoice handler.
func (Invoice) Kind() string { return "billing_invoice" }

// InsertOpts puts invoices on the billing queue.
func (Invoice) InsertOpts() jobfence.InsertOpts { return jobfence.InsertOpts{Queue: "billing"} }

// Notification sends Text to Customer through the Provider.
type Notification struct {
	Customer string `json:"customer"`
	Text     string `json:"text"`
}

// Kind names the notification handler.
func (Notification) Kind() string { return "billing_notification" }

// InsertOpts puts notifications on the notify queue.
func (Notification) InsertOpts() jobfence.InsertOpts { return jobfence.InsertOpts{Queue: "notify"} }

// Charge, Ship and Refund are an order's tasks.
type (
	// Charge charges Cents for Order.
	Charge struct {
		Order string `json:"order"`
		Cents int    `json:"cents"`
	}
	// Ship ships Order to Address.
	Ship struct {
		Order   string `json:"order"`
		Address string `json:"address"`
	}
	// Refund refunds Order's charge.
	Refund struct {
		Order string `json:"order"`
	}
)

// Kind names the charge handler.
func (Charge) Kind() string { return "order_charge" }

// Kind names the ship handler.
func (Ship) Kind() string { return "order_ship" }

// Kind names the refund handler.
func (Refund) Kind() string { return "order_refund" }

// Charged is the charge task's output, which the refund reads.
type Charged struct {
	ChargeID string `json:"charge_id"`
}

// Summary is the nightly summary's args.
type Summary struct{}

// Kind names the summary handler.
func (Summary) Kind() string { return "billing_summary" }

// InsertOpts puts the summary on the billing queue.
func (Summary) InsertOpts() jobfence.InsertOpts { return jobfence.InsertOpts{Queue: "billing"} }

// SummarySchedule names the nightly summary's schedule.
const SummarySchedule = "nightly-summary"

// Provider sends notifications. A refusal for the provider's rate is a
// *RateLimitedError.
type Provider interface {
	Send(ctx context.Context, customer, text string) error
}

// RateLimitedError is a provider's refusal for its rate (an HTTP 429),
// with its Retry-After (jobfence.RetryAfter reads the header).
type RateLimitedError struct {
	RetryAfter time.Duration
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("provider: rate limited, retry after %v", e.RetryAfter)
}

// ErrNoAddress is why an order without an address is not shipped.
var ErrNoAddress = errors.New("billing: the order has no address")

// Register adds the service's handlers to reg: their writes go to pool's
// tables (Setup creates them), notifications to p.
func Register(reg *jobfence.Registry, pool *pgxpool.Pool, p Provider) {
	// An invoice's row commits with its fenced completion: a worker
	// that lost the job writes nothing.
	jobfence.AddHandlerTx(reg, func(ctx context.Context, tx pgx.Tx, job *jobfence.Job[Invoice]) error {
		_, err := tx.Exec(ctx, `INSERT INTO invoices (customer, number, fence) VALUES ($1, $2, $3)`,
			job.Args.Customer, job.Args.Number, job.Fence)
		return err
	})
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[Notification]) error {
		err := p.Send(ctx, job.Args.Customer, job.Args.Text)
		if rl := (*RateLimitedError)(nil); errors.As(err, &rl) {
			// No attempt spent; the customer's partition grants nothing
			// until the provider's Retry-After has passed.
			return jobfence.JobRateLimited(rl.RetryAfter, err)
		}
		return err
	})
	jobfence.AddHandlerTx(reg, func(ctx context.Context, tx pgx.Tx, job *jobfence.Job[Charge]) error {
		id := fmt.Sprintf("ch_%s_%d", job.Args.Order, job.ID)
		if _, err := tx.Exec(ctx, `INSERT INTO charges (order_id, charge_id, cents) VALUES ($1, $2, $3)`,
			job.Args.Order, id, job.Args.Cents); err != nil {
			return err
		}
		return jobfence.RecordOutput(ctx, Charged{ChargeID: id})
	})
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[Ship]) error {
		if job.Args.Address == "" {
			return jobfence.JobCancel(ErrNoAddress) // no retry can fix it
		}
		return nil
	})
	jobfence.AddHandlerTx(reg, func(ctx context.Context, tx pgx.Tx, job *jobfence.Job[Refund]) error {
		// The charge is the refund's grandparent (charge -> ship ->
		// refund): any ancestor's output can be read.
		ch, err := workflow.Output[Charged](ctx, "charge")
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO refunds (order_id, charge_id) VALUES ($1, $2)`, job.Args.Order, ch.ChargeID)
		return err
	})
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[Summary]) error {
		var invoices int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM invoices`).Scan(&invoices); err != nil {
			return err
		}
		return jobfence.RecordOutput(ctx, map[string]int{"invoices": invoices})
	})
}

// Setup creates the service's tables and stores its limits and schedule
// for the fleet; every instance may run it at start.
func Setup(ctx context.Context, client *jobfence.Client, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, `
		CREATE TABLE IF NOT EXISTS invoices (customer text NOT NULL, number int NOT NULL, fence bigint NOT NULL,
			at timestamptz NOT NULL DEFAULT clock_timestamp(), PRIMARY KEY (customer, number));
		CREATE TABLE IF NOT EXISTS charges (order_id text PRIMARY KEY, charge_id text NOT NULL, cents int NOT NULL);
		CREATE TABLE IF NOT EXISTS refunds (order_id text PRIMARY KEY, charge_id text NOT NULL)`); err != nil {
		return fmt.Errorf("billing: tables: %w", err)
	}
	limits := []jobfence.Limit{
		// A customer's invoices one at a time, in the order raised.
		{Name: "invoices", Queue: "billing", Kind: Invoice{}.Kind(), PartitionBy: []string{"customer"}, Sequence: true},
		// The provider allows 20 a second per customer: one of headroom,
		// since the rate is counted at the claim, not at the provider.
		{Name: "notifications", Queue: "notify", PartitionBy: []string{"customer"}, Rate: 19, Period: time.Second},
	}
	for _, l := range limits {
		if err := client.Limits().Set(ctx, l); err != nil {
			return err
		}
	}
	_, err := client.Schedules().Put(ctx, SummarySchedule, "0 2 * * *", Summary{}, jobfence.ScheduleOptions{})
	return err
}

// Notify enqueues a notification, dropped if it has not started within
// an hour (a late reminder is worse than none).
func Notify(ctx context.Context, client *jobfence.Client, customer, text string) (int64, error) {
	res, err := client.Insert(ctx, Notification{Customer: customer, Text: text},
		&jobfence.InsertOpts{Deadline: time.Now().Add(time.Hour)})
	return res.ID, err
}

// PlaceOrder inserts an order's workflow: charge, then ship, then a refund
// that runs only if shipping failed.
func PlaceOrder(ctx context.Context, client *jobfence.Client, order string, cents int, address string) (jobfence.WorkflowResult, error) {
	orders := &jobfence.InsertOpts{Queue: "orders"}
	wf := workflow.New("order-"+order).
		Add("charge", Charge{Order: order, Cents: cents}, &workflow.TaskOpts{Insert: orders}).
		Add("ship", Ship{Order: order, Address: address}, &workflow.TaskOpts{DependsOn: []string{"charge"}, Insert: orders}).
		Add("refund", Refund{Order: order}, &workflow.TaskOpts{DependsOn: []string{"ship"}, RunOnFailure: true, Insert: orders})
	return client.InsertWorkflow(ctx, wf)
}
