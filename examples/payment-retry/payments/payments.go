// Package payments is the payment-retry scenario: a client sends a charge
// with an idempotency key; the payment provider is slow, so the client
// times out and retries while the first attempt is still running, then
// retries once more after it finished. The server runs every request
// through idempotency.DoJSON with the client's key: the first attempt
// charges, the second waits for its response (WaitForInProgress), the
// third gets the stored response. One charge, three equal answers.
package payments

import (
	"context"
	"fmt"
	"time"

	"github.com/jobfence/jobfence/examples/scenario"
	"github.com/jobfence/jobfence/idempotency"
)

const createChargesSQL = `CREATE TABLE charges (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	idempotency_key text NOT NULL,
	amount int NOT NULL)`

// ChargeRequest is what the client sends; its JSON is the request's
// fingerprint, so the same key with another amount is refused.
type ChargeRequest struct {
	Order  string `json:"order"`
	Amount int    `json:"amount"`
}

// ChargeResponse is what the server answers, stored under the key.
type ChargeResponse struct {
	ChargeID string `json:"charge_id"`
	Amount   int    `json:"amount"`
}

// providerDelay is how long the payment provider takes to charge, and
// clientTimeout how long the client waits on its first attempt.
const (
	providerDelay = time.Second
	clientTimeout = 200 * time.Millisecond
)

// Run plays the scenario on env and measures it.
func Run(ctx context.Context, env *scenario.Env) (scenario.Result, error) {
	var o scenario.Result
	if _, err := env.Pool.Exec(ctx, createChargesSQL); err != nil {
		return o, err
	}
	// The server: every charge request goes through the idempotency store.
	payments := idempotency.New(env.Pool, idempotency.Options{Scope: "payments", WaitForInProgress: true})
	handle := func(ctx context.Context, key string, req ChargeRequest) (ChargeResponse, error) {
		return idempotency.DoJSON(ctx, payments, key, req, func(ctx context.Context) (ChargeResponse, error) {
			// The payment provider: it records the charge, then takes its time.
			var id int64
			err := env.Pool.QueryRow(ctx, "INSERT INTO charges (idempotency_key, amount) VALUES ($1, $2) RETURNING id",
				key, req.Amount).Scan(&id)
			if err != nil {
				return ChargeResponse{}, err
			}
			select {
			case <-time.After(providerDelay):
			case <-ctx.Done():
				return ChargeResponse{}, ctx.Err()
			}
			return ChargeResponse{ChargeID: fmt.Sprintf("ch_%d", id), Amount: req.Amount}, nil
		})
	}

	// The client: one key for every attempt of this payment.
	key, req := "order-1001", ChargeRequest{Order: "1001", Amount: 4200}
	type answer struct {
		resp ChargeResponse
		err  error
	}
	first := make(chan answer, 1)
	go func() {
		// The server keeps working after the client gives up.
		resp, err := handle(ctx, key, req)
		first <- answer{resp, err}
	}()
	o.Attempted++
	var a1 answer
	select {
	case a1 = <-first:
		o.Problems = append(o.Problems, "the slow first attempt answered before the client's timeout")
	case <-time.After(clientTimeout):
		env.Logf("attempt 1 timed out on the client after %s; the server is still charging", clientTimeout)
	}
	o.Attempted++
	r2, err := handle(ctx, key, req)
	if err != nil {
		return o, fmt.Errorf("retry: %w", err)
	}
	env.Logf("attempt 2 (retry while attempt 1 runs) waited and got %s", r2.ChargeID)
	if a1 == (answer{}) {
		a1 = <-first
	}
	if a1.err != nil {
		return o, fmt.Errorf("first attempt: %w", a1.err)
	}
	o.Attempted++
	r3, err := handle(ctx, key, req)
	if err != nil {
		return o, fmt.Errorf("second retry: %w", err)
	}
	env.Logf("attempt 3 (retry after attempt 1 finished) got the stored %s", r3.ChargeID)
	if r2 != a1.resp || r3 != a1.resp {
		o.Problems = append(o.Problems, fmt.Sprintf("answers differ: %v, %v, %v", a1.resp, r2, r3))
	}
	if err := env.Pool.QueryRow(ctx, "SELECT count(*) FROM charges WHERE idempotency_key = $1", key).Scan(&o.Effects); err != nil {
		return o, err
	}
	o.WantEffects = 1
	o.Rejected = o.Attempted - o.Effects
	env.Logf("%d requests, %d charge(s)", o.Attempted, o.Effects)
	return o, nil
}
