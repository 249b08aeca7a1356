// Command killed-worker shows a worker killed mid-job whose job is rescued
// and finished by another instance.
//
// The program runs a worker in a child process (itself, re-executed) whose
// handler ships an order. Once the child has claimed the job and is in the
// middle of it, the program kills it with SIGKILL: no deferred cleanup, no
// goodbye. The job stays claimed until its 1s lease runs out; a worker in
// this process rescues it (any instance may, none leads) and runs it again
// under a new fence. The program prints the job's attempts and the
// shipments of the order, and exits non-zero unless the order shipped
// exactly once.
//
//	go run ./examples/killed-worker
//
// It uses the PostgreSQL that DATABASE_URL names, or starts a throwaway one.
package main

import (
	"github.com/jobfence/jobfence/examples/killed-worker/killed"
	"github.com/jobfence/jobfence/examples/scenario"
)

// The scenario's code is in package killed, beside this file; `jobfence
// demo` runs the same code. Copied into your module, point the import
// above at your copy.
func main() {
	scenario.Main("killed-worker", scenario.Servers{Postgres: true}, killed.Run)
}
