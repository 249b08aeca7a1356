package idempotency_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/idempotency"
	"github.com/jobfence/jobfence/internal/pgtest"
)

type purchase struct {
	Sold   bool   `json:"sold"`
	Reason string `json:"reason,omitempty"`
}

// buy sells one unit of sku with a conditional write, under the buyer's own
// idempotency key, in one transaction.
func buy(ctx context.Context, s *idempotency.Store, tx pgx.Tx, buyer, sku string) (purchase, error) {
	req := map[string]string{"sku": sku}
	return idempotency.DoTxJSON(ctx, s, tx, "buy:"+buyer, req, func(ctx context.Context, tx pgx.Tx) (purchase, error) {
		tag, err := tx.Exec(ctx, "UPDATE inventory SET qty = qty - 1 WHERE sku = $1 AND qty > 0", sku)
		if err != nil {
			return purchase{}, err
		}
		if tag.RowsAffected() == 0 {
			return purchase{Reason: "out of stock"}, nil
		}
		if _, err := tx.Exec(ctx, "INSERT INTO sales (sku, buyer) VALUES ($1, $2)", sku, buyer); err != nil {
			return purchase{}, err
		}
		return purchase{Sold: true}, nil
	})
}

// TestInventoryLastUnit: ten buyers race for the last unit, each with its
// own idempotency key; then each retries. One sale, nine "out of stock",
// quantity 0, and every retry gets its first answer.
func TestInventoryLastUnit(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.New(t)
	if _, err := db.Pool.Exec(ctx, `
		CREATE TABLE inventory (sku text PRIMARY KEY, qty int NOT NULL CHECK (qty >= 0));
		CREATE TABLE sales (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, sku text NOT NULL, buyer text NOT NULL);
		INSERT INTO inventory VALUES ('lamp', 1)`); err != nil {
		t.Fatal(err)
	}
	s := idempotency.New(db.Pool, idempotency.Options{Scope: "shop"})
	const buyers = 10
	answers := make([][2]purchase, buyers) // first call, retry
	for round := range 2 {
		var wg sync.WaitGroup
		errs := make([]error, buyers)
		start := make(chan struct{})
		for i := range buyers {
			wg.Go(func() {
				<-start
				errs[i] = inTx(t, ctx, db.Pool, func(tx pgx.Tx) error {
					var err error
					answers[i][round], err = buy(ctx, s, tx, fmt.Sprintf("buyer-%d", i), "lamp")
					return err
				}, true)
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d buyer %d: %v", round, i, err)
			}
		}
	}
	sold, out := 0, 0
	for i, a := range answers {
		if a[0] != a[1] {
			t.Fatalf("buyer %d got %+v, then %+v on retry", i, a[0], a[1])
		}
		switch {
		case a[0].Sold:
			sold++
		case a[0].Reason == "out of stock":
			out++
		}
	}
	var qty int
	if err := db.Pool.QueryRow(ctx, "SELECT qty FROM inventory WHERE sku = 'lamp'").Scan(&qty); err != nil {
		t.Fatal(err)
	}
	if sold != 1 || out != buyers-1 || qty != 0 || countRows(t, ctx, db.Pool, "sales") != 1 {
		t.Fatalf("%d sold, %d out of stock, qty %d, %d sales rows; want 1, 9, 0, 1", sold, out, qty, countRows(t, ctx, db.Pool, "sales"))
	}
}
