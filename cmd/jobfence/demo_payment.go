package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jobfence/jobfence/idempotency"
)

const createChargesSQL = `CREATE TABLE demo_charges (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	idempotency_key text NOT NULL,
	amount int NOT NULL)`

// demoPayment is scenario 2: a client times out while the provider is slow
// and retries, then retries again; every attempt carries one idempotency
// key, so one charge is made and every answer is the same.
func demoPayment(ctx context.Context, d *demo, p progress) (outcome, error) {
	var o outcome
	if _, err := d.pool.Exec(ctx, createChargesSQL); err != nil {
		return o, err
	}
	const providerDelay = time.Second
	type charge struct {
		ChargeID string `json:"charge_id"`
		Amount   int    `json:"amount"`
	}
	store := idempotency.New(d.pool, idempotency.Options{Scope: "demo-payments", WaitForInProgress: true})
	key := "order-1001"
	request := map[string]any{"order": "1001", "amount": 4200}
	handle := func(ctx context.Context) (charge, error) {
		return idempotency.DoJSON(ctx, store, key, request, func(ctx context.Context) (charge, error) {
			var id int64
			if err := d.pool.QueryRow(ctx, "INSERT INTO demo_charges (idempotency_key, amount) VALUES ($1, 4200) RETURNING id", key).Scan(&id); err != nil {
				return charge{}, err
			}
			select {
			case <-time.After(providerDelay):
			case <-ctx.Done():
				return charge{}, ctx.Err()
			}
			return charge{ChargeID: fmt.Sprintf("ch_%d", id), Amount: 4200}, nil
		})
	}

	type answer struct {
		c   charge
		err error
	}
	first := make(chan answer, 1)
	go func() {
		c, err := handle(ctx)
		first <- answer{c, err}
	}()
	o.Attempted++
	var a1 answer
	select {
	case a1 = <-first:
		o.Problems = append(o.Problems, "the slow first attempt answered before the client's timeout")
	case <-time.After(200 * time.Millisecond):
		p("attempt 1 timed out on the client after 200ms; the server is still charging")
	}
	o.Attempted++
	c2, err := handle(ctx)
	if err != nil {
		return o, fmt.Errorf("retry: %w", err)
	}
	p("attempt 2 (retry while attempt 1 runs) waited and got %s", c2.ChargeID)
	if a1 == (answer{}) {
		a1 = <-first
	}
	if a1.err != nil {
		return o, fmt.Errorf("first attempt: %w", a1.err)
	}
	o.Attempted++
	c3, err := handle(ctx)
	if err != nil {
		return o, fmt.Errorf("second retry: %w", err)
	}
	p("attempt 3 (retry after attempt 1 finished) got the stored %s", c3.ChargeID)
	if c2 != a1.c || c3 != a1.c {
		o.Problems = append(o.Problems, fmt.Sprintf("answers differ: %v, %v, %v", a1.c, c2, c3))
	}
	if err := d.pool.QueryRow(ctx, "SELECT count(*) FROM demo_charges WHERE idempotency_key = $1", key).Scan(&o.Effects); err != nil {
		return o, err
	}
	o.WantEffects = 1
	o.Rejected = o.Attempted - o.Effects
	p("%d requests, %d charge(s)", o.Attempted, o.Effects)
	return o, nil
}
