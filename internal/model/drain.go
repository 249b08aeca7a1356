package model

import (
	"fmt"
	"strings"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// drainBound bounds the drain's wait for progress: every job's wait is
// bounded (retry delays and schedules of under a second, a rate of one a
// second per partition), so when no job has been claimed for drainBound,
// the jobs still waiting wait for ever. The bound counts from the last
// claim, not from the drain's start: a backlog under a rate of one a
// second per partition takes as many seconds as it has jobs, and a loaded
// machine stretches every round, so a fixed deadline reported jobs that
// were still moving.
const drainBound = 40 * time.Second

// drainCap bounds the whole drain, progress or not: a drain that still
// claims after it (jobs that never stay ended) is reported too.
const drainCap = 10 * time.Minute

// drain ends the faults and runs the system until it is quiet, as a fleet
// would: the open append commits, frozen owners resume and report (their
// lost claims refused), paused queues resume, every lease still held runs
// out and is rescued, and promote, grant, claim and complete repeat until
// every job has ended. Then every job must be final, its attempts within
// its maximum.
func (r *runner) drain() {
	s := r.s
	r.appendEnd(false)
	// Every queue is resumed, a few tries each: the first calls after a
	// terminated backend fail on its dead connections.
	for _, q := range queueNames() {
		for try := 0; try < 5; try++ {
			ctx, cancel := r.opCtx()
			err := r.c.ResumeQueue(ctx, q, "model")
			cancel()
			if r.called("ResumeQueue", err, nil) || r.v != nil {
				break
			}
		}
	}
	clear(s.paused)
	for o := range s.owners {
		s.owners[o].frozen = false
		for _, j := range append([]*queue.Job(nil), s.owners[o].claims...) {
			r.finish(o, j, queue.OutcomeComplete, 0, inTx)
		}
	}
	s.abandoned = nil
	// The drain runs every lease out: a rescue may give an attempt back,
	// so the next attempt of a job is not told.
	for _, j := range s.jobs {
		j.lastAttempt = -1
	}
	start := time.Now()
	end := start.Add(drainBound)
	for r.v == nil && time.Now().Before(end) && time.Since(start) < drainCap {
		ctx, cancel := r.opCtx()
		_, err := r.admin.Exec(ctx, `UPDATE jobfence_jobs SET lease_expires_at = now() - interval '1 second' WHERE state = 'running'`)
		cancel()
		if !r.called("expire every lease", err, nil) {
			continue
		}
		r.rescue()
		r.promote()
		ctx, cancel = r.opCtx()
		_, err = r.c.GrantWaiting(ctx, 1000)
		cancel()
		r.called("GrantWaiting", err, nil)
		claimed := 0
		for _, q := range world {
			for r.v == nil {
				jobs := r.claim(0, q.name, 20)
				for _, j := range jobs {
					r.finish(0, j, queue.OutcomeComplete, 0, batch)
				}
				claimed += len(jobs)
				s.stats.Drained += len(jobs)
				if len(jobs) == 0 {
					break
				}
			}
		}
		if r.v != nil {
			return
		}
		left := r.unfinished()
		if len(left) == 0 {
			break
		}
		if claimed == 0 {
			time.Sleep(100 * time.Millisecond)
		} else {
			end = time.Now().Add(drainBound)
		}
	}
	if r.v != nil {
		return
	}
	if left := r.unfinished(); len(left) > 0 {
		r.fail("drain", "%d jobs not final after the faults stopped (%v without a claim, or %v in all): %s", len(left), drainBound, drainCap, strings.Join(left, "; "))
		return
	}
	ctx, cancel := r.opCtx()
	defer cancel()
	var over int
	var detail string
	err := r.admin.QueryRow(ctx, `SELECT count(*), coalesce(string_agg(id || ' attempt ' || attempt || ' of ' || max_attempts, ', '), '')
        FROM (SELECT id, attempt, max_attempts FROM jobfence_jobs UNION ALL SELECT id, attempt, max_attempts FROM jobfence_jobs_finished) j
        WHERE attempt > max_attempts`).Scan(&over, &detail)
	if r.called("read attempts", err, nil) && over > 0 {
		r.fail("attempts", "%d jobs with more attempts than their maximum: %s", over, detail)
	}
	r.checkCompensations()
	r.checkSignals()
}

// unfinished lists the model's jobs that have not ended, with the reason
// they wait.
func (r *runner) unfinished() []string {
	ctx, cancel := r.opCtx()
	defer cancel()
	rows, err := r.admin.Query(ctx, `SELECT id, state, queue, coalesce(limit_name, ''), coalesce(limit_part, '') || CASE WHEN j.state = 'pending'
            THEN ' deps_left ' || j.deps_left || ', dependencies ' || coalesce((SELECT string_agg(d.id || ' ' || d.state || ' (attempt ' || d.attempt || coalesce(', released ' || d.dependents_released, '') || coalesce(', ' || (d.errors -> -1 ->> 'error'), '') || ')', ', ')
                FROM jobfence_jobs d WHERE d.id = ANY (j.depends_on)), '') || ', edges ' || coalesce((SELECT string_agg(e.dependency || ' counted ' || e.counted, ', ')
                FROM jobfence_task_edges e WHERE e.dependent = j.id), 'none') ELSE '' END, scheduled_at - now()
        FROM jobfence_jobs j WHERE state NOT IN ('completed', 'discarded', 'cancelled') ORDER BY id LIMIT 20`)
	if !r.called("read unfinished", err, nil) {
		return []string{"(unread)"}
	}
	defer rows.Close()
	var left []string
	var ids []int64
	for rows.Next() {
		var id int64
		var st, q, l, p string
		var in time.Duration
		if err := rows.Scan(&id, &st, &q, &l, &p, &in); err != nil {
			return []string{err.Error()}
		}
		ids = append(ids, id)
		left = append(left, fmt.Sprintf("job %d %s in %s (limit %s/%s, due in %v)", id, st, q, l, p, in.Round(time.Millisecond)))
	}
	rows.Close()
	for i, id := range ids {
		if why, err := r.c.WaitReason(ctx, id); err == nil && why != "" {
			left[i] += ": " + why
		}
	}
	return left
}
