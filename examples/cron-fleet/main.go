// Command cron-fleet shows a cron job deployed on 20 instances firing once
// per tick. It runs 20 scheduler instances in one process, each with its own
// connection pool as separate hosts would have, all registering the same
// per-second schedule, for three fires. It prints the fires and the jobs
// enqueued, which must be equal, and exits 1 otherwise.
//
// It uses the PostgreSQL that DATABASE_URL names, or starts a throwaway one.
package main

import (
	"github.com/jobfence/jobfence/examples/cron-fleet/fleet"
	"github.com/jobfence/jobfence/examples/scenario"
)

// The scenario's code is in package fleet, beside this file; `jobfence
// demo` runs the same code. Copied into your module, point the import
// above at your copy.
func main() {
	scenario.Main("cron-fleet", scenario.Servers{Postgres: true}, fleet.Run)
}
