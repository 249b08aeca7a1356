package main

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/idempotency"
)

const (
	createInventorySQL = `CREATE TABLE demo_inventory (sku text PRIMARY KEY, qty int NOT NULL CHECK (qty >= 0));
CREATE TABLE demo_sales (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, sku text NOT NULL, buyer text NOT NULL);
INSERT INTO demo_inventory VALUES ('lamp', 1)`
	takeUnitSQL = `UPDATE demo_inventory SET qty = qty - 1 WHERE sku = 'lamp' AND qty > 0`
)

// demoInventory is scenario 3: ten buyers race for the last unit, each with
// its own idempotency key, then all retry. The purchase is a conditional
// write in the same transaction as the buyer's key.
func demoInventory(ctx context.Context, d *demo, p progress) (outcome, error) {
	var o outcome
	if _, err := d.pool.Exec(ctx, createInventorySQL); err != nil {
		return o, err
	}
	type purchase struct {
		Sold bool `json:"sold"`
	}
	shop := idempotency.New(d.pool, idempotency.Options{Scope: "demo-shop"})
	buy := func(ctx context.Context, buyer string) (pu purchase, err error) {
		err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
			pu, err = idempotency.DoTxJSON(ctx, shop, tx, buyer+":lamp", map[string]string{"sku": "lamp"},
				func(ctx context.Context, tx pgx.Tx) (purchase, error) {
					tag, err := tx.Exec(ctx, takeUnitSQL)
					if err != nil || tag.RowsAffected() == 0 {
						return purchase{}, err
					}
					_, err = tx.Exec(ctx, "INSERT INTO demo_sales (sku, buyer) VALUES ('lamp', $1)", buyer)
					return purchase{Sold: true}, err
				})
			return err
		})
		return pu, err
	}
	const buyers = 10
	var first []purchase
	for _, round := range []string{"first try", "retry"} {
		answers := make([]purchase, buyers)
		errs := make([]error, buyers)
		var wg sync.WaitGroup
		for i := range buyers {
			wg.Go(func() { answers[i], errs[i] = buy(ctx, fmt.Sprintf("buyer-%d", i)) })
		}
		wg.Wait()
		sold := 0
		for i := range buyers {
			if errs[i] != nil {
				return o, fmt.Errorf("buyer-%d: %w", i, errs[i])
			}
			if answers[i].Sold {
				sold++
			}
			if first != nil && answers[i] != first[i] {
				o.Problems = append(o.Problems, fmt.Sprintf("buyer-%d's retry got another answer", i))
			}
		}
		o.Attempted += buyers
		first = answers
		p("%s: %d buyers, %d told sold", round, buyers, sold)
	}
	var qty int
	if err := d.pool.QueryRow(ctx, "SELECT qty, (SELECT count(*) FROM demo_sales) FROM demo_inventory").Scan(&qty, &o.Effects); err != nil {
		return o, err
	}
	if qty != 0 {
		o.Problems = append(o.Problems, fmt.Sprintf("quantity left %d, want 0", qty))
	}
	o.WantEffects = 1
	o.Rejected = o.Attempted - o.Effects
	p("%d purchase requests, %d sale(s), quantity left %d", o.Attempted, o.Effects, qty)
	return o, nil
}
