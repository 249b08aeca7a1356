package model

import (
	"errors"
	"fmt"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// started records job j's start (a claim before its deadline) and checks,
// by reading the database at that moment, every promise a start can
// break: the limit of its partition (a slot held through retries and
// put-backs included), its rate window, its sequence's order, its
// workflow dependencies, and its attempt count.
func (r *runner) started(j *queue.Job) {
	s := r.s
	s.stats.Starts++
	info := s.jobs[j.ID]
	if j.Attempt < 1 || j.Attempt > j.MaxAttempts {
		r.fail("attempts", "job %d started with attempt %d of %d", j.ID, j.Attempt, j.MaxAttempts)
		return
	}
	if info != nil {
		if info.lastAttempt >= 0 && j.Attempt != info.lastAttempt+1 {
			r.fail("attempts", "job %d started with attempt %d after attempt %d", j.ID, j.Attempt, info.lastAttempt)
			return
		}
		info.lastAttempt = j.Attempt
		info.starts++
	}
	st := start{id: j.ID, at: j.AttemptedAt, fence: j.Fence, attempt: j.Attempt, limit: j.Limit, part: j.LimitPartition}
	if l := s.limits[j.Limit]; j.Limit != "" && l != nil && !l.deleted {
		r.checkBackoff(j)
		r.checkLimit(j, l, st)
	}
	s.starts = append(s.starts, st)
	if info != nil && len(info.deps) > 0 && r.v == nil {
		r.checkDeps(j, info)
	}
}

// checkLimit checks a start against its limit.
func (r *runner) checkLimit(j *queue.Job, l *limitState, st start) {
	spec := l.spec
	conc := spec.Concurrency
	if spec.Sequence {
		conc = 1
	}
	hold := spec.Sequence || spec.OnFailure == pgqueue.FailureHold || spec.OnFailure == pgqueue.FailureHalt
	if conc > 0 {
		// Every running job holds its slot, its lease live or not: a
		// holder whose worker froze keeps it until a rescue moves it on.
		// Under a hold policy a job waiting for its retry, or put back
		// after it ran, keeps its slot too.
		var running, held int
		ctx, cancel := r.opCtx()
		err := r.admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'running'),
                count(*) FILTER (WHERE state IN ('retryable', 'scheduled') AND attempted_at IS NOT NULL AND id <> $3)
            FROM jobfence_jobs WHERE limit_name = $1 AND limit_part = $2`, spec.Name, j.LimitPartition, j.ID).Scan(&running, &held)
		cancel()
		if !r.called("count running", err, nil) {
			return
		}
		if running > conc {
			rule := "concurrency"
			if l.lowered {
				rule = "lowered limit"
			}
			r.fail(rule, "job %d started in %s/%s with %d running (this one included), limit %d", j.ID, spec.Name, j.LimitPartition, running, conc)
			return
		} else if hold && running+held > conc {
			r.fail("held slot", "job %d started in %s/%s with %d running and %d waiting to run again that hold their slots (%s), limit %d",
				j.ID, spec.Name, j.LimitPartition, running, held, r.listPart(spec.Name, j.LimitPartition), conc)
			return
		}
	}
	if spec.Rate > 0 {
		n := 1
		var ids []int64
		for _, p := range r.s.starts {
			if p.limit == spec.Name && p.part == st.part && st.at.Sub(p.at) < spec.Period {
				n++
				ids = append(ids, p.id)
			}
		}
		if n > spec.Rate {
			r.fail("rate", "job %d started in %s/%s at %s with %d starts within %v before it (jobs %v), rate %d per %v",
				j.ID, spec.Name, st.part, st.at.Format("15:04:05.000"), n-1, spec.Period, ids, spec.Rate, spec.Period)
			return
		}
	}
	if spec.Sequence {
		if info := r.s.jobs[j.ID]; info != nil && !info.revived {
			r.checkSequence(j, spec)
		}
	}
}

// checkSequence: every job inserted into the sequence before j has ended,
// unless an operator's retry brought it back (it lost its place) or its
// deadline passed before j started.
func (r *runner) checkSequence(j *queue.Job, spec pgqueue.Limit) {
	ctx, cancel := r.opCtx()
	defer cancel()
	// A job waiting past its deadline will never start (the grant passes
	// over it, the sweep discards it): it has left the order.
	rows, err := r.admin.Query(ctx, `SELECT id, state FROM jobfence_jobs WHERE limit_name = $1 AND limit_part = $2 AND id < $3
        AND state NOT IN ('completed', 'discarded', 'cancelled')
        AND NOT (state <> 'running' AND deadline IS NOT NULL AND deadline <= $4) ORDER BY id`, spec.Name, j.LimitPartition, j.ID, j.AttemptedAt)
	if !r.called("read sequence", err, nil) {
		return
	}
	defer rows.Close()
	var before []string
	for rows.Next() {
		var id int64
		var st string
		if err := rows.Scan(&id, &st); err != nil {
			r.called("read sequence", err, nil)
			return
		}
		if info := r.s.jobs[id]; info != nil && info.revived {
			continue
		}
		before = append(before, fmt.Sprintf("%d %s", id, st))
	}
	if r.called("read sequence", rows.Err(), nil) && len(before) > 0 {
		r.fail("sequence", "job %d of %s/%s started while jobs inserted before it had not ended: %v", j.ID, spec.Name, j.LimitPartition, before)
	}
}

// checkDeps: a workflow task starts only after each dependency ended in a
// state that releases it: completed, or any end where it runs anyway or
// only on a failure; and one that runs only on a failure, only if some
// dependency's end that released it (countedEnd) was a failure,
// unless a Retry ran it. A task's start also reads an ancestor's output,
// which must be allowed (d reads a, its grandparent), and a sibling's,
// which must be refused (b reads c).
func (r *runner) checkDeps(j *queue.Job, info *jobInfo) {
	failed := false
	for _, d := range info.deps {
		w, ok := r.readRow(d)
		if !ok {
			return
		}
		end := r.countedEnd(info, d, w.state)
		failed = failed || end == "discarded" || end == "cancelled"
		if r.depReleases(info, d, w.state) {
			continue
		}
		rule := "workflow"
		if info.retriedEarly {
			rule = "workflow retry before dependencies"
		}
		r.fail(rule, "task %s (job %d, run anyway %v, on failure %v) started while its dependency %d is %s",
			info.task, j.ID, info.runAnyway, info.runOnFailure, d, w.state)
		return
	}
	if info.runOnFailure && !failed && !info.revived {
		r.fail("workflow on failure", "task %s (job %d) runs only on a failure, and started though no dependency failed", info.task, j.ID)
		return
	}
	r.checkOutputs(j, info)
}

// checkOutputs reads, at the start of a task of the fan-out/fan-in, an
// ancestor's output (d reads a's: allowed, whatever a recorded) and a
// sibling's (b reads c's: refused with ErrNotAncestor).
func (r *runner) checkOutputs(j *queue.Job, info *jobInfo) {
	var name string
	var allowed bool
	switch info.task {
	case "d":
		name, allowed = "a", true
	case "b":
		name = "c"
	default:
		return
	}
	ctx, cancel := r.opCtx()
	defer cancel()
	_, err := r.c.TaskOutput(ctx, j.ID, name)
	refused := errors.Is(err, queue.ErrNotAncestor)
	if !refused && err != nil && !errors.Is(err, queue.ErrNoOutput) && !r.called("TaskOutput", err, nil) {
		return
	}
	if refused == allowed {
		r.fail("workflow output", "task %s (job %d) read %s's output: %v (an ancestor's is allowed, a sibling's refused)", info.task, j.ID, name, err)
	}
}

// checkCompensations, once every job has ended: a task that runs only on
// a failure, whose dependencies' ends that released it (countedEnd) all
// completed, never started (unless a Retry ran it): its release cancelled
// it, or it was cancelled or discarded before.
func (r *runner) checkCompensations() {
	for _, info := range r.s.jobs {
		if !info.runOnFailure || info.revived || r.v != nil {
			continue
		}
		completed := true
		for _, d := range info.deps {
			first := r.countedEnd(info, d, "")
			if first == "" {
				w, ok := r.readRow(d)
				if !ok {
					return
				}
				first = w.state
			}
			completed = completed && first == "completed"
		}
		if !completed {
			continue
		}
		w, ok := r.readRow(info.id)
		if !ok {
			return
		}
		if w.attempt != 0 || w.state == "completed" {
			r.fail("workflow on failure", "task %s (job %d) runs only on a failure and every dependency completed, yet it is %s after %d attempts",
				info.task, info.id, w.state, w.attempt)
		}
	}
}

// releases reports whether a dependency in state st releases task t.
func releases(t *jobInfo, st string) bool {
	return st == "completed" || (t.runAnyway || t.runOnFailure) && (st == "discarded" || st == "cancelled")
}

// countedEnd is the end of dependency d (in state st now) that task t
// counts: the first end a retry after t's insert brought d back from,
// else st (see depReleases).
func (r *runner) countedEnd(t *jobInfo, d int64, st string) string {
	if dep := r.s.jobs[d]; dep != nil {
		for _, e := range dep.ends {
			if e.step >= t.born {
				return e.state
			}
		}
	}
	return st
}

// depReleases reports whether dependency d, in state st now, has
// released task t: it ended in a state that releases t, now or in an end
// that a retry after t's insert brought it back from. An end before that
// retry may have come before t's insert too: then t counted it at its
// insert (an append to an ended task), the same end. Ends brought back
// before t's insert are not t's: an append counts its dependency's next
// end (before the fix of the model, a task appended to a cancelled and
// retried dependency that then completed was reported, seed 10180).
func (r *runner) depReleases(t *jobInfo, d int64, st string) bool {
	if releases(t, st) {
		return true
	}
	if dep := r.s.jobs[d]; dep != nil {
		for _, e := range dep.ends {
			if e.step >= t.born && releases(t, e.state) {
				return true
			}
		}
	}
	return false
}

// released reports whether every dependency of t has released it (true
// for a job with none, and where a row could not be read).
func (r *runner) released(t *jobInfo) bool {
	for _, d := range t.deps {
		if w, ok := r.readRow(d); ok && !r.depReleases(t, d, w.state) {
			return false
		}
	}
	return true
}

// listPart lists a partition's unfinished jobs, for a violation's detail.
func (r *runner) listPart(name, part string) string {
	ctx, cancel := r.opCtx()
	defer cancel()
	rows, err := r.admin.Query(ctx, `SELECT id, state, attempt FROM jobfence_jobs WHERE limit_name = $1 AND limit_part = $2
        AND state NOT IN ('completed', 'discarded', 'cancelled') ORDER BY id`, name, part)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	out := ""
	for rows.Next() {
		var id int64
		var st string
		var a int
		if rows.Scan(&id, &st, &a) == nil {
			out += fmt.Sprintf("[%d %s attempt %d]", id, st, a)
		}
	}
	return out
}

// checkStep checks, after every step, what must hold at every moment: no
// partition of a limit that was never lowered runs more jobs than its
// concurrency.
func (r *runner) checkStep() {
	ctx, cancel := r.opCtx()
	defer cancel()
	rows, err := r.admin.Query(ctx, `SELECT limit_name, limit_part, count(*) FROM jobfence_jobs
        WHERE state = 'running' AND limit_name IS NOT NULL GROUP BY 1, 2`)
	if !r.called("count running", err, nil) {
		return
	}
	defer rows.Close()
	for rows.Next() {
		var name, part string
		var n int
		if err := rows.Scan(&name, &part, &n); err != nil {
			r.called("count running", err, nil)
			return
		}
		l := r.s.limits[name]
		if l == nil || l.deleted || l.lowered {
			continue
		}
		conc := l.spec.Concurrency
		if l.spec.Sequence {
			conc = 1
		}
		if conc > 0 && n > conc {
			r.fail("concurrency", "%d jobs running in %s/%s, limit %d", n, name, part, conc)
			return
		}
	}
	r.called("count running", rows.Err(), nil)
}

// promote runs the promoter, as every worker does, and checks its
// deadline sweep: no job still waits to start past a deadline that passed
// before the promoter ran.
func (r *runner) promote() {
	ctx, cancel := r.opCtx()
	defer cancel()
	var t0 time.Time
	if !r.called("now", r.admin.QueryRow(ctx, `SELECT now()`).Scan(&t0), nil) {
		return
	}
	if _, err := r.c.Promote(ctx, 1000); !r.called("Promote", err, nil) {
		return
	}
	rows, err := r.admin.Query(ctx, `SELECT id, state, deadline FROM jobfence_jobs
        WHERE deadline < $1 AND state IN ('available', 'scheduled', 'retryable', 'limited', 'pending') ORDER BY id LIMIT 5`, t0)
	if !r.called("read late jobs", err, nil) {
		return
	}
	defer rows.Close()
	var late []string
	for rows.Next() {
		var id int64
		var st string
		var dl time.Time
		if err := rows.Scan(&id, &st, &dl); err != nil {
			r.called("read late jobs", err, nil)
			return
		}
		late = append(late, fmt.Sprintf("job %d %s, deadline %s", id, st, dl.Format("15:04:05.000")))
	}
	if r.called("read late jobs", rows.Err(), nil) && len(late) > 0 {
		r.fail("deadline", "after the promoter's sweep (started %s), jobs still wait to start past their deadline: %v", t0.Format("15:04:05.000"), late)
	}
}
