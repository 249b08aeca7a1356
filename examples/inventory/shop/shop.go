// Package shop is the inventory scenario: ten buyers race for the last
// unit of an item, each with its own idempotency key, then all retry. A
// purchase is a conditional write (UPDATE ... SET qty = qty - 1 WHERE
// qty > 0) in one transaction with the buyer's key
// (idempotency.DoTxJSON), so the item sells once and every retry gets the
// answer its first try got.
package shop

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/examples/scenario"
	"github.com/jobfence/jobfence/idempotency"
)

const (
	createInventorySQL = `CREATE TABLE inventory (sku text PRIMARY KEY, qty int NOT NULL CHECK (qty >= 0));
CREATE TABLE sales (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, sku text NOT NULL, buyer text NOT NULL);
INSERT INTO inventory VALUES ('lamp', 1)`
	takeUnitSQL = `UPDATE inventory SET qty = qty - 1 WHERE sku = 'lamp' AND qty > 0`
)

// Purchase is a buyer's answer, stored under the buyer's key.
type Purchase struct {
	Sold   bool   `json:"sold"`
	Reason string `json:"reason,omitempty"`
}

// Run plays the scenario on env and measures it.
func Run(ctx context.Context, env *scenario.Env) (scenario.Result, error) {
	var o scenario.Result
	if _, err := env.Pool.Exec(ctx, createInventorySQL); err != nil {
		return o, err
	}
	shop := idempotency.New(env.Pool, idempotency.Options{Scope: "shop"})
	buy := func(ctx context.Context, buyer string) (p Purchase, err error) {
		err = pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
			p, err = idempotency.DoTxJSON(ctx, shop, tx, buyer+":lamp", map[string]string{"sku": "lamp"},
				func(ctx context.Context, tx pgx.Tx) (Purchase, error) {
					tag, err := tx.Exec(ctx, takeUnitSQL)
					if err != nil {
						return Purchase{}, err
					}
					if tag.RowsAffected() == 0 {
						return Purchase{Reason: "out of stock"}, nil
					}
					_, err = tx.Exec(ctx, "INSERT INTO sales (sku, buyer) VALUES ('lamp', $1)", buyer)
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
		for i := range buyers {
			if errs[i] != nil {
				return o, fmt.Errorf("buyer-%d: %w", i, errs[i])
			}
			if answers[i].Sold {
				sold++
				env.Logf("%s: buyer-%d bought the lamp", round, i)
			}
			if first != nil && answers[i] != first[i] {
				o.Problems = append(o.Problems, fmt.Sprintf("buyer-%d got %+v, then %+v on retry", i, first[i], answers[i]))
			}
		}
		o.Attempted += buyers
		first = answers
		env.Logf("%s: %d buyers, %d told sold, %d out of stock", round, buyers, sold, buyers-sold)
	}
	var qty int
	if err := env.Pool.QueryRow(ctx, "SELECT qty, (SELECT count(*) FROM sales) FROM inventory").Scan(&qty, &o.Effects); err != nil {
		return o, err
	}
	if qty != 0 {
		o.Problems = append(o.Problems, fmt.Sprintf("quantity left %d, want 0", qty))
	}
	o.WantEffects = 1
	o.Rejected = o.Attempted - o.Effects
	env.Logf("%d purchase requests, %d sale(s), quantity left %d", o.Attempted, o.Effects, qty)
	return o, nil
}
