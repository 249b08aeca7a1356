// Command inventory shows ten buyers racing for the last unit of an item.
//
// Each buyer sends its purchase with its own idempotency key. The purchase
// runs in one transaction through idempotency.DoTxJSON: a conditional write
// (UPDATE ... SET qty = qty - 1 WHERE qty > 0) takes the unit if one is
// left, and the answer is stored under the buyer's key in the same
// transaction. Then every buyer retries. The program prints each answer and
// the quantity left, and exits non-zero on an oversell.
//
//	go run ./examples/inventory
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/idempotency"
	"github.com/jobfence/jobfence/jobfencetest/devserver"
	"github.com/jobfence/jobfence/migrations"
)

// Purchase is a buyer's answer, stored under the buyer's key.
type Purchase struct {
	Sold   bool   `json:"sold"`
	Reason string `json:"reason,omitempty"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "inventory:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	env, err := devserver.Start(ctx, devserver.Options{Postgres: true})
	if err != nil {
		return err
	}
	defer env.Close()
	if err := migrations.Up(ctx, env.DatabaseURL); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, env.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	sku := fmt.Sprintf("lamp-%d", time.Now().UnixNano())
	if _, err := pool.Exec(ctx, `
		CREATE TABLE IF NOT EXISTS example_inventory (sku text PRIMARY KEY, qty int NOT NULL CHECK (qty >= 0));
		CREATE TABLE IF NOT EXISTS example_sales (
			id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, sku text NOT NULL, buyer text NOT NULL)`); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, "INSERT INTO example_inventory (sku, qty) VALUES ($1, 1)", sku); err != nil {
		return err
	}

	shop := idempotency.New(pool, idempotency.Options{Scope: "shop"})
	buy := func(ctx context.Context, buyer string) (p Purchase, err error) {
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			p, err = idempotency.DoTxJSON(ctx, shop, tx, buyer+":"+sku, map[string]string{"sku": sku},
				func(ctx context.Context, tx pgx.Tx) (Purchase, error) {
					tag, err := tx.Exec(ctx, "UPDATE example_inventory SET qty = qty - 1 WHERE sku = $1 AND qty > 0", sku)
					if err != nil {
						return Purchase{}, err
					}
					if tag.RowsAffected() == 0 {
						return Purchase{Reason: "out of stock"}, nil
					}
					_, err = tx.Exec(ctx, "INSERT INTO example_sales (sku, buyer) VALUES ($1, $2)", sku, buyer)
					return Purchase{Sold: true}, err
				})
			return err
		})
		return p, err
	}

	const buyers = 10
	var first []Purchase
	for _, round := range []string{"first try", "retry"} {
		answers := make([]Purchase, buyers)
		errs := make([]error, buyers)
		var wg sync.WaitGroup
		for i := range buyers {
			wg.Go(func() { answers[i], errs[i] = buy(ctx, fmt.Sprintf("buyer-%d", i)) })
		}
		wg.Wait()
		sold := 0
		for i, p := range answers {
			if errs[i] != nil {
				return fmt.Errorf("buyer-%d: %w", i, errs[i])
			}
			if p.Sold {
				sold++
				fmt.Printf("%s: buyer-%d: sold\n", round, i)
			} else {
				fmt.Printf("%s: buyer-%d: %s\n", round, i, p.Reason)
			}
		}
		fmt.Printf("%s: %d sold, %d out of stock\n", round, sold, buyers-sold)
		if first == nil {
			first = answers
			continue
		}
		for i := range answers {
			if answers[i] != first[i] {
				return fmt.Errorf("buyer-%d got %+v, then %+v on retry", i, first[i], answers[i])
			}
		}
	}

	var qty, sales int
	if err := pool.QueryRow(ctx, "SELECT qty, (SELECT count(*) FROM example_sales WHERE sku = $1) FROM example_inventory WHERE sku = $1",
		sku).Scan(&qty, &sales); err != nil {
		return err
	}
	fmt.Printf("quantity left: %d, sales recorded: %d\n", qty, sales)
	if sales != 1 || qty != 0 {
		return fmt.Errorf("want 1 sale and quantity 0, got %d sales and quantity %d", sales, qty)
	}
	return nil
}
