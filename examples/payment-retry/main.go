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
	"github.com/jobfence/jobfence/examples/payment-retry/payments"
	"github.com/jobfence/jobfence/examples/scenario"
)

// The scenario's code is in package payments, beside this file; `jobfence
// demo` runs the same code. Copied into your module, point the import
// above at your copy.
func main() {
	scenario.Main("payment-retry", scenario.Servers{Postgres: true}, payments.Run)
}
