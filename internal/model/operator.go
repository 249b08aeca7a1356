package model

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
)

// expire runs the lease of job id's claim fence out, as time would for a
// worker that stopped heartbeating.
func (r *runner) expire(id, fence int64) {
	ctx, cancel := r.opCtx()
	defer cancel()
	_, err := r.admin.Exec(ctx, `UPDATE jobfence_jobs SET lease_expires_at = now() - interval '1 second'
        WHERE id = $1 AND fence = $2 AND state = 'running'`, id, fence)
	if r.called("expire", err, nil) {
		if j := r.s.jobs[id]; j != nil {
			j.lastAttempt = -1
		}
	}
}

// rescue moves the jobs of expired leases on, as every worker's
// maintenance does.
func (r *runner) rescue() {
	ctx, cancel := r.opCtx()
	defer cancel()
	_, err := r.c.Rescue(ctx, queue.RescueParams{Limit: 1000, Backoff: func(*queue.Job) time.Duration { return 50 * time.Millisecond }})
	r.called("Rescue", err, nil)
}

// heartbeat extends the leases of every owner that runs.
func (r *runner) heartbeat() {
	for i, o := range r.s.owners {
		if o.frozen || len(o.claims) == 0 {
			continue
		}
		var ls []queue.Lease
		for _, j := range o.claims {
			ls = append(ls, j.Lease())
		}
		ctx, cancel := r.opCtx()
		lost, err := r.c.Heartbeat(ctx, ls, lease)
		cancel()
		if !r.called(fmt.Sprintf("Heartbeat of owner %d (%d leases)", i, len(ls)), err, nil) {
			return
		}
		for _, l := range lost {
			for _, j := range o.claims {
				if j.Lease() == l {
					r.s.drop(i, j)
					break
				}
			}
		}
	}
}

// admin3 is an operator's Cancel, Retry or RetryForce of a job.
func (r *runner) admin3(op Op) {
	j := r.s.pickJob(op.Pick, op.Flag)
	if op.Flag && op.Kind != OpCancel {
		j = r.endedTask(op.Pick)
	}
	if j == nil {
		return
	}
	if op.Kind != OpCancel && !r.released(j) {
		// A retry of a task whose dependencies have not released it
		// (pending, or cancelled with a dependency) is told apart: it is
		// a path of its own into the task's start.
		j.retriedEarly = true
	}
	if op.Kind == OpRetryForce {
		j.forced = true
	}
	prior, ok := r.readRow(j.id)
	if !ok {
		return
	}
	ctx, cancel := r.opCtx()
	defer cancel()
	var err error
	switch op.Kind {
	case OpCancel:
		err = r.c.Cancel(ctx, j.id)
	case OpRetry:
		err = r.c.Retry(ctx, j.id)
	case OpRetryForce:
		err = r.c.RetryForce(ctx, j.id)
	}
	ok = r.called(string(op.Kind), err, anyErr)
	if op.Kind == OpCancel || r.v != nil {
		return
	}
	if !ok && final(prior.state) {
		// A call that failed (its connection lost) may have committed:
		// a final job that is no longer final was retried.
		if now, read := r.readRow(j.id); read && !final(now.state) {
			ok = true
		}
	}
	if ok {
		j.revived, j.lastAttempt = true, -1
		// The end it was brought back from released the dependents
		// inserted before it (depReleases).
		if final(prior.state) {
			j.ends = append(j.ends, end{step: r.step, state: prior.state})
		}
	}
}

// endedTask picks, among the workflow tasks that have ended, number pick
// (modulo): a retry of one ends it a second time, the path on which a
// task could release its dependents twice.
func (r *runner) endedTask(pick int) *jobInfo {
	var ids []int64
	for _, id := range r.s.order {
		if r.s.jobs[id].workflow != "" {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	ctx, cancel := r.opCtx()
	defer cancel()
	rows, err := r.admin.Query(ctx, `SELECT id FROM jobfence_jobs WHERE id = ANY($1) AND state IN ('completed', 'discarded', 'cancelled')
        UNION ALL SELECT id FROM jobfence_jobs_finished WHERE id = ANY($1) ORDER BY id`, ids)
	if !r.called("read ended tasks", err, nil) {
		return nil
	}
	ended, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if !r.called("read ended tasks", err, nil) || len(ended) == 0 {
		return nil
	}
	return r.s.jobs[ended[pick%len(ended)]]
}

// limitChange sets a limit's concurrency or deletes a limit.
func (r *runner) limitChange(op Op) {
	names := []string{"conc", "hold"}
	if op.Kind == OpDeleteLimit {
		names = []string{"conc", "hold", "holdrate", "seq", "rate"}
	}
	l := r.s.limits[names[op.Pick%len(names)]]
	n := op.N % 3
	if op.Kind == OpSetLimit && op.N == 3 {
		// The fair limit, its FairBy and weights kept.
		l, n = r.s.limits["fair"], op.Pick%3
	}
	if l.deleted {
		return
	}
	ctx, cancel := r.opCtx()
	defer cancel()
	if op.Kind == OpDeleteLimit {
		if r.called("DeleteLimit", r.c.DeleteLimit(ctx, l.spec.Name), nil) {
			l.deleted = true
		}
		return
	}
	spec := l.spec
	spec.Concurrency = 1 + n
	if !r.called("SetLimit", r.c.SetLimit(ctx, spec), nil) {
		return
	}
	if spec.Concurrency < l.spec.Concurrency {
		l.lowered = true
	}
	l.spec = spec
}
