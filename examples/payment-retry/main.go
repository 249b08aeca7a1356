// Command payment-retry shows a retried payment charging once.
//
// A client sends a charge with an idempotency key. The payment provider is
// slow, so the client times out and retries while the first attempt is still
// running, then retries once more after it finished. The server runs every
// request through idempotency.DoJSON with the client's key: the first
// attempt charges, the second waits for its response, the third gets the
// stored response. The program prints the three answers and the number of
// charges, and exits non-zero if there is more than one.
//
//	go run ./examples/payment-retry
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/idempotency"
	"github.com/jobfence/jobfence/jobfencetest/devserver"
	"github.com/jobfence/jobfence/migrations"
)

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

// providerDelay is how long the payment provider takes to charge.
const providerDelay = 2 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "payment-retry:", err)
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
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS example_charges (
		id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		idempotency_key text NOT NULL,
		amount int NOT NULL)`); err != nil {
		return err
	}

	// The server: every charge request goes through the idempotency store.
	// WaitForInProgress makes a retry wait for the attempt still running.
	payments := idempotency.New(pool, idempotency.Options{Scope: "payments", WaitForInProgress: true})
	handleCharge := func(ctx context.Context, key string, req ChargeRequest) (ChargeResponse, error) {
		return idempotency.DoJSON(ctx, payments, key, req, func(ctx context.Context) (ChargeResponse, error) {
			// The payment provider: it records the charge, then takes its time.
			var id int64
			err := pool.QueryRow(ctx, "INSERT INTO example_charges (idempotency_key, amount) VALUES ($1, $2) RETURNING id",
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
	key := fmt.Sprintf("order-1001-%d", time.Now().UnixNano())
	req := ChargeRequest{Order: "1001", Amount: 4200}
	serverDone := make(chan struct{})
	send := func(attempt int, timeout time.Duration) (ChargeResponse, error) {
		type answer struct {
			resp ChargeResponse
			err  error
		}
		answers := make(chan answer, 1)
		go func() {
			// The server keeps working after the client gives up.
			resp, err := handleCharge(ctx, key, req)
			answers <- answer{resp, err}
			if attempt == 1 {
				close(serverDone)
			}
		}()
		select {
		case a := <-answers:
			return a.resp, a.err
		case <-time.After(timeout):
			return ChargeResponse{}, fmt.Errorf("timed out after %s", timeout)
		}
	}

	var responses []ChargeResponse
	for attempt, timeout := range []time.Duration{500 * time.Millisecond, time.Minute, time.Minute} {
		if attempt == 2 {
			<-serverDone // retry once more after the first attempt finished
		}
		resp, err := send(attempt+1, timeout)
		if err != nil {
			fmt.Printf("attempt %d: %v\n", attempt+1, err)
			if attempt > 0 {
				return err
			}
			continue
		}
		fmt.Printf("attempt %d: charged %s, amount %d\n", attempt+1, resp.ChargeID, resp.Amount)
		responses = append(responses, resp)
	}

	var charges int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM example_charges WHERE idempotency_key = $1", key).Scan(&charges); err != nil {
		return err
	}
	fmt.Printf("charges made for key %s: %d\n", key, charges)
	if charges != 1 {
		return fmt.Errorf("%d charges for one payment", charges)
	}
	if len(responses) != 2 || responses[0] != responses[1] {
		return errors.New("the retries got different responses")
	}
	return nil
}
