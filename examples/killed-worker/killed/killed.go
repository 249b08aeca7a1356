// Package killed is the killed-worker scenario: a worker process claims a
// job and is killed with SIGKILL mid-job; once its 1s lease runs out,
// another instance rescues the job and finishes it. The job is never lost.
package killed

import (
	"context"
	"fmt"
	"strings"

	"github.com/jobfence/jobfence/examples/scenario"
)

// queueName is the queue of the scenario's one job.
const queueName = "killed"

// Run plays the scenario on env and measures it.
func Run(ctx context.Context, env *scenario.Env) (scenario.Result, error) {
	var o scenario.Result
	r, err := scenario.ShipDisruptRescue(ctx, env, queueName, 5, "SIGKILL", func(ch *scenario.Child) error {
		if err := ch.Cmd.Process.Kill(); err != nil {
			return err
		}
		_ = ch.Wait() // "signal: killed"
		return nil
	})
	if err != nil {
		return o, err
	}
	r.Stop()
	j := r.Job

	effects, effectFence, _, err := scenario.Shipments(ctx, env.Pool, r.JobID)
	if err != nil {
		return o, err
	}
	o.Attempted = 2 // the killed attempt and the rescuer's
	o.Effects, o.WantEffects = effects, 1
	if effects == 1 && effectFence != j.Fence {
		o.Problems = append(o.Problems, fmt.Sprintf("the shipment has fence %d, want the rescuer's %d", effectFence, j.Fence))
	}
	if j.Attempt != 2 || len(j.Errors) != 1 || !strings.Contains(j.Errors[0].Error, "lease expired") || !r.Rescued() {
		o.Problems = append(o.Problems, fmt.Sprintf("job ran %d attempts with errors %v, want 2 with one expired lease", j.Attempt, j.Errors))
	}
	first := ""
	if len(j.Errors) > 0 {
		first = j.Errors[0].Error
	}
	env.Logf("job attempts: %d (first: %q); shipments of order 5: %d", j.Attempt, first, effects)
	return o, nil
}
