// Command paused-worker shows a worker paused past its lease being fenced
// out, and the job's effect applied once.
//
// The program runs a worker in a child process (itself, re-executed). The
// worker's handler ships an order: it records the shipment in the job's
// transaction (worker.AddTx), which commits only together with the job's
// completion under the claim's fence. Once the child has claimed the job,
// the program freezes it with SIGSTOP. The 1s lease runs out, and a worker
// in this process rescues the job and ships the order under a new fence.
// Then the child is resumed with SIGCONT: it wakes up in the middle of its
// handler and writes the shipment without a second look, as a careless
// handler would; its completion is refused as stale and its transaction
// rolls back. The program prints the shipments of the order and exits
// non-zero unless there is exactly one.
//
//	go run ./examples/paused-worker
//
// It uses the PostgreSQL that DATABASE_URL names, or starts a throwaway one.
package main

import (
	"github.com/jobfence/jobfence/examples/paused-worker/paused"
	"github.com/jobfence/jobfence/examples/scenario"
)

// The scenario's code is in package paused, beside this file; `jobfence
// demo` runs the same code. Copied into your module, point the import
// above at your copy.
func main() {
	scenario.Main("paused-worker", scenario.Servers{Postgres: true}, paused.Run)
}
