// Package paused is the paused-worker scenario: a worker process claims a
// job, is paused with SIGSTOP past its 1s lease, the job is rescued and
// shipped by another instance, then the paused process is resumed and
// writes its shipment without checking anything. That write sits in a
// transaction (worker.AddTx) that can commit only together with the job's
// completion under the old fence; the completion is refused as stale, so
// the whole transaction rolls back: the order ships once.
package paused

import (
	"context"
	"fmt"
	"syscall"

	"github.com/jobfence/jobfence/examples/scenario"
)

// queueName is the queue of the scenario's one job.
const queueName = "paused"

// Run plays the scenario on env and measures it.
func Run(ctx context.Context, env *scenario.Env) (scenario.Result, error) {
	var o scenario.Result
	r, err := scenario.ShipDisruptRescue(ctx, env, queueName, 4, "SIGSTOP", func(ch *scenario.Child) error {
		return ch.Cmd.Process.Signal(syscall.SIGSTOP)
	})
	if err != nil {
		return o, err
	}
	defer r.Stop()
	ch, j := r.Child, r.Job
	// The line is waiting in the pipe when the process resumes: it wakes
	// and writes at once, as a paused process does.
	if _, err := fmt.Fprintln(ch.Stdin, "wake"); err != nil {
		return o, err
	}
	if err := ch.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return o, err
	}
	co, err := ch.Outcome(ctx)
	if err != nil {
		return o, err
	}
	if err := ch.Wait(); err != nil {
		return o, fmt.Errorf("worker process: %w", err)
	}
	// The write is refused at the completion under the stale fence, or
	// earlier if the woken worker's first heartbeat (refused under the same
	// fence) cancelled the handler first; either way it rolls back.
	how := "its completion under fence %d was refused as stale; its transaction rolled back"
	if co.Stale == 0 {
		how = "its heartbeat under fence %d was refused, so the worker cancelled the handler; its transaction rolled back"
	}
	env.Logf("SIGCONT: the woken process wrote its shipment; committed %d; "+how, co.Completed, r.Fence)
	r.Stop()

	effects, effectFence, writer, err := scenario.Shipments(ctx, env.Pool, r.JobID)
	if err != nil {
		return o, err
	}
	o.Attempted = 2 // the paused owner's write and the rescuer's
	o.Effects, o.WantEffects = effects, 1
	if co.Stale+co.Lost > 0 {
		o.Rejected = 1
	}
	if co.Completed != 0 || o.Rejected != 1 {
		o.Problems = append(o.Problems, fmt.Sprintf("paused process: committed %d, refused %d; want 0 and 1", co.Completed, co.Stale+co.Lost))
	}
	if effects == 1 && (effectFence != j.Fence || writer == ch.ID()) {
		o.Problems = append(o.Problems, fmt.Sprintf("the shipment has fence %d by %s, want the rescuer's fence %d", effectFence, writer, j.Fence))
	}
	if j.Attempt != 2 || !r.Rescued() {
		o.Problems = append(o.Problems, fmt.Sprintf("job ran %d attempts, want 2 (one rescued)", j.Attempt))
	}
	env.Logf("shipments of order 4: %d (by %s under fence %d)", effects, writer, effectFence)
	return o, nil
}
