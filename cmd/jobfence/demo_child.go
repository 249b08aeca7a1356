package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"

	"github.com/jobfence/jobfence/examples/durable-steps/durable"
	"github.com/jobfence/jobfence/examples/order-workflow/orderflow"
	harness "github.com/jobfence/jobfence/examples/scenario"
)

// demoChildEnv marks a process started by the demo as one of its worker
// processes (the test binary looks for it to run the child instead of the
// tests).
const demoChildEnv = "JOBFENCE_DEMO_CHILD"

const demoChildUsage = "usage: demo-child paused|killed|order-workflow|durable-steps (it is run by jobfence demo, with DATABASE_URL set)"

// runDemoChild is the worker process of scenarios 4 and 5 (see
// scenario.RunShipWorker), 9 (orderflow.RunChild) and 10
// (durable.RunChild), on the queue its argument names.
func runDemoChild(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		fmt.Fprintln(stderr, demoChildUsage)
		return flag.ErrHelp
	}
	if len(args) == 1 && args[0] == orderflow.Queue {
		return orderflow.RunChild(ctx, args[0], stdout)
	}
	if len(args) == 1 && args[0] == durable.Queue {
		return durable.RunChild(ctx, args[0], stdout)
	}
	if len(args) != 1 || (args[0] != "paused" && args[0] != "killed") {
		return fmt.Errorf("%s", demoChildUsage)
	}
	return harness.RunShipWorker(ctx, args[0], stdout)
}

// demoWorkerProcess returns, for the scenarios' Env, the command that runs
// this executable's demo-child on queue q against databaseURL.
func demoWorkerProcess(self, databaseURL string, stderr io.Writer) func(ctx context.Context, q string) *exec.Cmd {
	return func(ctx context.Context, q string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, self, "demo-child", q)
		cmd.Env = append(os.Environ(), demoChildEnv+"=1", "DATABASE_URL="+databaseURL)
		cmd.Stderr = stderr
		return cmd
	}
}
