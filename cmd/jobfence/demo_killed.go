package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/worker"
)

// demoKilled is scenario 5: a worker process claims a job and is killed
// with SIGKILL mid-job; after its 1s lease another instance rescues the job
// and finishes it.
func demoKilled(ctx context.Context, d *demo, p progress) (outcome, error) {
	var o outcome
	c, id, ch, fence, err := shipInChild(ctx, d, "killed", 5)
	if err != nil {
		return o, err
	}
	defer ch.kill()
	if err := ch.cmd.Process.Kill(); err != nil {
		return o, err
	}
	_ = ch.wait() // "signal: killed"
	p("worker process %d claimed job %d (fence %d); SIGKILL", ch.pid(), id, fence)
	ws, stop, err := rescuers(ctx, d, "killed", 2)
	if err != nil {
		return o, err
	}
	defer stop()
	j, err := waitCompleted(ctx, c, id)
	if err != nil {
		return o, err
	}
	stop()
	p("its 1s lease ran out; %s rescued the job and finished it under fence %d", j.AttemptedBy[len(j.AttemptedBy)-1], j.Fence)

	var effects, effectFence int64
	var writer string
	if err := d.pool.QueryRow(ctx, shipmentsSQL, id).Scan(&effects, &effectFence, &writer); err != nil {
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
	p("job attempts: %d (first: %q); shipments of order 5: %d", j.Attempt, firstError(j.Errors), effects)
	return o, nil
}

// firstError is the first recorded attempt error, or "".
func firstError(errs []queue.AttemptError) string {
	if len(errs) == 0 {
		return ""
	}
	return errs[0].Error
}
