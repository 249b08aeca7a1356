// Command durable-steps shows a durable job whose workers are killed and
// paused between its steps: each step's effect happens once, and the job
// resumes where it stopped.
//
// An order is one durable job of three steps, charge, reserve and ship,
// with a durable sleep before ship. A worker in a child process (this
// program, re-executed) runs charge, which is recorded, and is killed
// with SIGKILL before reserve. A second child rescues the job once its 1s
// lease runs out, replays charge from its record (no second charge),
// runs reserve and is frozen with SIGSTOP. The fleet's other instances
// (in this process) rescue the job in turn, replay charge and reserve,
// sleep holding no worker, and run ship. The frozen child, continued with
// SIGCONT, finds its handler cancelled before its next step. The program
// prints what each step did and exits non-zero unless each step took
// effect once, by the attempt that recorded it.
//
//	go run ./examples/durable-steps
//
// It uses the PostgreSQL that DATABASE_URL names, or starts a throwaway one.
package main

import (
	"github.com/jobfence/jobfence/examples/durable-steps/durable"
	"github.com/jobfence/jobfence/examples/scenario"
)

// The scenario's code is in package durable, beside this file; `jobfence
// demo` runs the same code. Copied into your module, point the import
// above at your copy.
func main() {
	scenario.MainWithChild("durable-steps", scenario.Servers{Postgres: true}, durable.Run, durable.RunChild)
}
