// Package killed is the killed-worker scenario: a worker process claims a
// job and is killed with SIGKILL mid-job; once its 1s lease runs out,
// another instance rescues the job and finishes it. The job is never lost.
package killed

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jobfence/jobfence/examples/scenario"
	"github.com/jobfence/jobfence/worker"
)

// queueName is the queue of the scenario's one job.
const queueName = "killed"

// Run plays the scenario on env and measures it.
func Run(ctx context.Context, env *scenario.Env) (scenario.Result, error) {
	var o scenario.Result
	s, err := scenario.ShipInChild(ctx, env, queueName, 5)
	if err != nil {
		return o, err
	}
	ch := s.Child
	defer ch.Kill()
	if err := ch.Cmd.Process.Kill(); err != nil {
		return o, err
	}
	_ = ch.Wait() // "signal: killed"
	env.Logf("worker process %d claimed job %d (fence %d); SIGKILL", ch.Pid(), s.JobID, s.Fence)
	ws, stop, err := scenario.Rescuers(ctx, env, queueName, 2)
	if err != nil {
		return o, err
	}
	defer stop()
	j, err := scenario.WaitCompleted(ctx, s.Client, s.JobID)
	if err != nil {
		return o, err
	}
	stop()
	env.Logf("its 1s lease ran out; %s rescued the job and finished it under fence %d", j.AttemptedBy[len(j.AttemptedBy)-1], j.Fence)

	effects, effectFence, _, err := scenario.Shipments(ctx, env.Pool, s.JobID)
	if err != nil {
		return o, err
	}
	o.Attempted = 2 // the killed attempt and the rescuer's
	o.Effects, o.WantEffects = effects, 1
	if effects == 1 && effectFence != j.Fence {
		o.Problems = append(o.Problems, fmt.Sprintf("the shipment has fence %d, want the rescuer's %d", effectFence, j.Fence))
	}
	rescued := slices.ContainsFunc(ws, func(w *worker.Worker) bool { return w.Stats().Rescued > 0 })
	if j.Attempt != 2 || len(j.Errors) != 1 || !strings.Contains(j.Errors[0].Error, "lease expired") || !rescued {
		o.Problems = append(o.Problems, fmt.Sprintf("job ran %d attempts with errors %v, want 2 with one expired lease", j.Attempt, j.Errors))
	}
	first := ""
	if len(j.Errors) > 0 {
		first = j.Errors[0].Error
	}
	env.Logf("job attempts: %d (first: %q); shipments of order 5: %d", j.Attempt, first, effects)
	return o, nil
}
