// Command order-workflow shows a workflow whose step's worker is paused
// past its lease: the step runs again elsewhere, the steps after it run
// once with that run's output, and the paused worker's late completion
// changes nothing.
//
// An order is a workflow: charge, then reserve stock and send the receipt
// side by side, then ship once both are done. A worker in a child process
// (this program, re-executed) runs charge, records the charge's ID as its
// output, and is frozen with SIGSTOP before its completion. Its 1s lease
// runs out; the fleet's other instances (in this process) rescue charge,
// run it again, and its fenced completion releases reserve and receipt;
// theirs release ship. Then the child is resumed with SIGCONT: its
// completion is refused as stale, so its output is not stored and it
// releases nothing. The program prints what each step saw and exits
// non-zero unless each ran once, after charge's one accepted completion,
// with that attempt's output.
//
//	go run ./examples/order-workflow
//
// It uses the PostgreSQL that DATABASE_URL names, or starts a throwaway one.
package main

import (
	"github.com/jobfence/jobfence/examples/order-workflow/orderflow"
	"github.com/jobfence/jobfence/examples/scenario"
)

// The scenario's code is in package orderflow, beside this file; `jobfence
// demo` runs the same code. Copied into your module, point the import
// above at your copy.
func main() {
	scenario.MainWithChild("order-workflow", scenario.Servers{Postgres: true}, orderflow.Run, orderflow.RunChild)
}
