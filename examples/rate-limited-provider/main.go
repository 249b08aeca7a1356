// Command rate-limited-provider shows a fleet of ten workers calling a
// provider that allows 5 concurrent calls and 50 a second.
//
// A limit stored in the database (pgqueue.Limit: Concurrency 5, Rate 50
// per second) governs the queue of provider calls; every worker of the
// fleet obeys it, so the provider never sees more. The program prints the
// most calls it saw at once, the most started within a second, and exits
// non-zero if the provider was overrun or a call was lost.
//
//	go run ./examples/rate-limited-provider
package main

import (
	"github.com/jobfence/jobfence/examples/rate-limited-provider/provider"
	"github.com/jobfence/jobfence/examples/scenario"
)

// The scenario's code is in package provider, beside this file; `jobfence
// demo` runs the same code. Copied into your module, point the import
// above at your copy.
func main() {
	scenario.Main("rate-limited-provider", scenario.Servers{Postgres: true}, provider.Run)
}
