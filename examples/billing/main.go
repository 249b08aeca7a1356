// Command billing runs the notifications and billing service of package
// billing against a throwaway PostgreSQL: one jobfence.Client for the
// invoices (a sequence per customer), the notifications (a rate per
// customer that waits out the provider's 429s), an order workflow with a
// compensating refund, and a nightly summary. Its tests
// (billing/billing_test.go) use jobfencetest on the same client.
//
//	go run ./examples/billing
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence"
	"github.com/jobfence/jobfence/examples/billing/billing"
	"github.com/jobfence/jobfence/jobfencetest/devserver"
	"github.com/jobfence/jobfence/migrations"
)

// provider refuses its first call for its rate, as a busy provider does.
type provider struct{ calls int }

func (p *provider) Send(ctx context.Context, customer, text string) error {
	if p.calls++; p.calls == 1 {
		return &billing.RateLimitedError{RetryAfter: 500 * time.Millisecond}
	}
	fmt.Printf("sent to %s: %s\n", customer, text)
	return nil
}

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	env, err := devserver.Start(ctx, devserver.Options{Postgres: true}) // or your DATABASE_URL
	if err != nil {
		return err
	}
	defer env.Close()
	if err := migrations.Up(ctx, env.DatabaseURL); err != nil {
		return err
	}
	poolCfg, err := jobfence.PoolConfig(env.DatabaseURL, billing.Queues)
	if err != nil {
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	reg := jobfence.NewRegistry()
	billing.Register(reg, pool, &provider{})
	client, err := jobfence.NewClient(pool, jobfence.Config{Queues: billing.Queues, Handlers: reg})
	if err != nil {
		return err
	}
	if err := billing.Setup(ctx, client, pool); err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	defer client.Stop(context.Background())

	var ids []int64
	for n := 1; n <= 3; n++ {
		res, err := client.Insert(ctx, billing.Invoice{Customer: "acme", Number: n}, nil)
		if err != nil {
			return err
		}
		ids = append(ids, res.ID)
	}
	id, err := billing.Notify(ctx, client, "acme", "your invoices are ready")
	if err != nil {
		return err
	}
	ids = append(ids, id)
	for _, o := range []struct{ order, address string }{{"A-1", "1 Main St"}, {"A-2", ""}} {
		res, err := billing.PlaceOrder(ctx, client, o.order, 1999, o.address)
		if err != nil {
			return err
		}
		ids = append(ids, res.Tasks["charge"], res.Tasks["ship"], res.Tasks["refund"])
	}
	// Wait, a bounded while, for every job to end, then print them.
	deadline := time.Now().Add(30 * time.Second)
	for _, id := range ids {
		for {
			j, err := client.Get(ctx, id)
			if err != nil {
				return err
			}
			if j.State.Final() {
				fmt.Printf("job %d %-20s %-10s attempt %d\n", j.ID, j.Kind, j.State, j.Attempt)
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("job %d still %s after 30s", id, j.State)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}
