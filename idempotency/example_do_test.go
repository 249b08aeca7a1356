package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/jobfence/jobfence/idempotency"
	"github.com/jobfence/jobfence/jobfencetest"
)

// A charge retried with the same key runs once and answers the same each
// time; the same key with another request is refused.
func ExampleDoJSON() {
	ctx := context.Background()
	db, err := jobfencetest.OpenDB(ctx, os.Getenv("DATABASE_URL")) // a migrated schema; in a service, your pool
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	payments := idempotency.New(db.Pool, idempotency.Options{Scope: "payments"})

	charges := 0
	charge := func(ctx context.Context) (string, error) {
		charges++ // the payment provider, given the same key
		return fmt.Sprintf("ch_%d", charges), nil
	}
	for range 3 {
		id, err := idempotency.DoJSON(ctx, payments, "order-7", map[string]int{"amount": 500}, charge)
		fmt.Println(id, err)
	}
	_, err = idempotency.DoJSON(ctx, payments, "order-7", map[string]int{"amount": 900}, charge)
	fmt.Println("another amount, same key:", errors.Is(err, idempotency.ErrKeyReused))
	fmt.Println("charges:", charges)
	// Output:
	// ch_1 <nil>
	// ch_1 <nil>
	// ch_1 <nil>
	// another amount, same key: true
	// charges: 1
}
