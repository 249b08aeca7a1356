package model

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// insert enqueues one job: plain, scheduled, unique, with a deadline,
// under the limit of its queue in a partition.
func (r *runner) insert(op Op) {
	q := world[op.Queue%len(world)]
	part := fmt.Sprintf("p%d", op.Part%partitions)
	p := queue.EnqueueParams{Kind: "k", Queue: q.name, Args: fmt.Appendf(nil, `{"p":%q,"n":%d}`, part, r.step), MaxAttempts: max(1, op.N)}
	now := time.Now()
	// A sequence's jobs are inserted due: its order is insert order, and a
	// job scheduled later would block the sequence until then by design.
	if op.Ms > 0 && q.name != "seq" {
		p.ScheduledAt = now.Add(time.Duration(op.Ms) * time.Millisecond)
	}
	if op.Deadline > 0 {
		p.Deadline = now.Add(time.Duration(op.Deadline) * time.Millisecond)
		if p.Deadline.Before(p.ScheduledAt) {
			p.Deadline = p.ScheduledAt
		}
	}
	switch {
	case op.Unique > 0 && op.Flag && q.name != "seq":
		// A debounce, per queue and partition: a duplicate of a job
		// that has not started moves that job to this insert's time.
		p.Unique = &queue.UniqueOpts{ByQueue: true, ByFields: []string{"p"}, Debounce: true}
	case op.Unique > 0:
		p.UniqueKey = fmt.Sprintf("u%d", op.Unique)
	}
	if q.name == "seq" {
		p.LimitKey = "s" + part
	}
	if q.name == "fair" {
		// Priorities that the client's PriorityAging improves while the
		// jobs wait available (the fair queue alone, so that the
		// operation lists written before it claim as they did).
		p.Priority = 1 + (op.Part+r.step)%queue.MaxPriority
	}
	ctx, cancel := r.opCtx()
	defer cancel()
	res, err := r.c.Enqueue(ctx, p)
	if !r.called("Enqueue", err, nil) {
		return
	}
	if p.Unique != nil && !res.Inserted {
		if res.Debounced {
			r.s.stats.Debounced++
		}
		return
	}
	if p.UniqueKey != "" {
		_, had := r.s.uniques[p.UniqueKey]
		if res.Inserted == had {
			r.fail("unique", "insert with key %s: inserted %v, but the model holds a job with that key: %v", p.UniqueKey, res.Inserted, had)
			return
		}
		if !res.Inserted {
			return
		}
		r.s.uniques[p.UniqueKey] = res.ID
	}
	j := &jobInfo{id: res.ID, queue: q.name, part: part, deadline: p.Deadline, unique: p.UniqueKey, born: r.step, priority: max(1, p.Priority)}
	if l := r.s.limits[q.name]; q.limit != nil && l != nil && !l.deleted {
		j.limit = l.spec.Name
	}
	r.s.add(j)
}

// taskParams is a workflow task's job.
func taskParams(name string) queue.EnqueueParams {
	return queue.EnqueueParams{Kind: "wfk", Queue: "wf", Args: fmt.Appendf(nil, `{"task":%q}`, name), MaxAttempts: 2}
}

// workflow inserts a fan-out/fan-in: a, then b and c, then d after both;
// d runs anyway, or only on a failure, as op.Policy says, and has
// op.Deadline.
func (r *runner) workflow(op Op) {
	anyway, onFailure := op.Policy()
	tasks := []queue.WorkflowTask{
		{Name: "a", Params: taskParams("a")},
		{Name: "b", Params: taskParams("b"), DependsOn: []string{"a"}},
		{Name: "c", Params: taskParams("c"), DependsOn: []string{"a"}},
		{Name: "d", Params: taskParams("d"), DependsOn: []string{"b", "c"}, RunAnyway: anyway, RunOnFailure: onFailure},
	}
	if op.Deadline > 0 {
		tasks[3].Params.Deadline = time.Now().Add(time.Duration(op.Deadline) * time.Millisecond)
	}
	ctx, cancel := r.opCtx()
	defer cancel()
	res, err := r.c.InsertWorkflow(ctx, queue.WorkflowParams{Name: fmt.Sprintf("wf%d", len(r.s.wfs)), Tasks: tasks})
	if !r.called("InsertWorkflow", err, nil) {
		return
	}
	wf := &wfInfo{id: res.ID, tasks: res.Tasks}
	for _, t := range tasks {
		j := &jobInfo{id: res.Tasks[t.Name], queue: "wf", workflow: res.ID, task: t.Name, deadline: t.Params.Deadline,
			runAnyway: t.RunAnyway, runOnFailure: t.RunOnFailure, born: r.step}
		for _, d := range t.DependsOn {
			j.deps = append(j.deps, res.Tasks[d])
		}
		wf.names = append(wf.names, t.Name)
		r.s.add(j)
	}
	r.s.wfs = append(r.s.wfs, wf)
}

// appendOpen appends a task to a workflow inside a caller's transaction
// that it leaves open: the caller is paused between its append and its
// commit, and the fleet must not wait for it.
func (r *runner) appendOpen(op Op) {
	if len(r.s.wfs) == 0 {
		return
	}
	r.appendEnd(false)
	wf := r.s.wfs[op.Pick%len(r.s.wfs)]
	dep := wf.names[(op.Pick/7)%len(wf.names)]
	name := fmt.Sprintf("x%d", r.step)
	tx, err := r.pool.Begin(r.ctx)
	if !r.called("Begin", err, nil) {
		return
	}
	ctx, cancel := r.opCtx()
	defer cancel()
	anyway, onFailure := op.Policy()
	res, err := r.c.InsertWorkflowTx(ctx, tx, queue.WorkflowParams{ID: wf.id,
		Tasks: []queue.WorkflowTask{{Name: name, Params: taskParams(name), DependsOn: []string{dep}, RunAnyway: anyway, RunOnFailure: onFailure}}})
	if !r.called("InsertWorkflowTx", err, anyErr) {
		_ = tx.Rollback(context.Background())
		return
	}
	r.tx, r.txWf = tx, wf
	r.txJob = &jobInfo{id: res.Tasks[name], queue: "wf", workflow: wf.id, task: name, deps: []int64{wf.tasks[dep]},
		runAnyway: anyway, runOnFailure: onFailure, born: r.step}
}

// appendEnd ends the open append: commits it, or rolls it back.
func (r *runner) appendEnd(rollback bool) {
	if r.tx == nil {
		return
	}
	tx, j, wf := r.tx, r.txJob, r.txWf
	r.tx, r.txJob, r.txWf = nil, nil, nil
	ctx, cancel := r.opCtx()
	defer cancel()
	if rollback {
		_ = tx.Rollback(ctx)
		return
	}
	if r.called("Commit of an append", tx.Commit(ctx), nil) {
		wf.tasks[j.task] = j.id
		wf.names = append(wf.names, j.task)
		r.s.add(j)
	}
}

// claim: owner o claims up to n jobs of queue q, as a worker's fetch does
// (not from a paused queue, not while frozen).
func (r *runner) claim(o int, q string, n int) []*queue.Job {
	if r.s.paused[q] || r.s.owners[o].frozen {
		return nil
	}
	ctx, cancel := r.opCtx()
	defer cancel()
	jobs, err := r.c.Claim(ctx, queue.ClaimParams{Queue: q, Limit: n, Lease: lease, WorkerID: fmt.Sprintf("owner%d", o)})
	if !r.called("Claim", err, nil) {
		return nil
	}
	var started []*queue.Job
	for _, j := range jobs {
		if r.v != nil {
			break
		}
		if !j.Deadline.IsZero() && !j.AttemptedAt.Before(j.Deadline) {
			// Claimed at or past its deadline: the worker discards it
			// unrun (worker/deadline.go); not a start.
			r.s.owners[o].claims = append(r.s.owners[o].claims, j)
			r.finish(o, j, queue.OutcomeDiscard, 0, batch)
			continue
		}
		r.started(j)
		r.s.owners[o].claims = append(r.s.owners[o].claims, j)
		started = append(started, j)
	}
	return started
}

// row is what a fenced write may change of a job.
type row struct {
	state    string
	fence    int64
	attempt  int
	sched    time.Time
	errors   int
	finished bool
}

const rowSQL = `SELECT state, fence, attempt, scheduled_at, jsonb_array_length(errors), false FROM jobfence_jobs WHERE id = $1
UNION ALL
SELECT state, fence, attempt, scheduled_at, jsonb_array_length(errors), true FROM jobfence_jobs_finished WHERE id = $1
LIMIT 1`

// granted reports whether before -> after is a grant and nothing else: a
// refused outcome's statement hands the partition's free slots out all
// the same, which may make this very job, waiting again, available.
func granted(before, after row) bool {
	if before.state != "limited" || after.state != "available" {
		return false
	}
	before.state, before.sched = after.state, after.sched
	return before == after
}

// readRow reads job id's row; ok is false where it could not.
func (r *runner) readRow(id int64) (row, bool) {
	var w row
	ctx, cancel := r.opCtx()
	defer cancel()
	err := r.admin.QueryRow(ctx, rowSQL, id).Scan(&w.state, &w.fence, &w.attempt, &w.sched, &w.errors, &w.finished)
	return w, r.called(fmt.Sprintf("read job %d", id), err, nil)
}

// finish reports an outcome of owner o's claim j, as a worker's completer
// does, and checks the fence: a write under a claim that is no longer
// current must be refused and change nothing; one under the current
// claim must land.
// how a finish is reported: in Finish's batch, as a put-back (an unknown
// kind's), or in a transaction of the caller's with FinishTx, as a
// transactional handler's completion commits.
type how int

const (
	batch how = iota
	putBack
	inTx
	// rateLimited: a snooze of the Retry-After that backs the job's
	// partition off as long (JobRateLimited's outcome).
	rateLimited
	// awaiting: a suspension awaiting the signal (AwaitSignal's outcome),
	// which records no error.
	awaiting
)

func (r *runner) finish(o int, j *queue.Job, out queue.Outcome, delay time.Duration, via how) {
	r.s.drop(o, j)
	p, ok := r.prepare(j, out, delay, via)
	if !ok {
		return
	}
	var stale []queue.Lease
	var err error
	if via == inTx {
		err = r.finishTx(p.f)
		if errors.Is(err, queue.ErrStaleFence) {
			stale, err = []queue.Lease{p.f.Lease}, nil
		}
	} else {
		ctx, cancel := r.opCtx()
		stale, err = r.c.Finish(ctx, []queue.Finish{p.f})
		cancel()
	}
	if !r.called(fmt.Sprintf("Finish %s of job %d fence %d", out, j.ID, j.Fence), err, nil) {
		// The outcome may or may not have landed: its lease runs out
		// unless it did, and an expiry and a rescue move it on.
		r.s.abandoned = append(r.s.abandoned, j)
		return
	}
	r.judge(p, len(stale) > 0)
}

// outcome is one outcome on its way to the real system: its Finish, and
// what the judge compares the row with afterwards.
type outcome struct {
	j      *queue.Job
	out    queue.Outcome
	f      queue.Finish
	before row
	bo     *backoffReport
}

// prepare reads job j's row and builds the Finish of its outcome out;
// ok is false where the row could not be read (or a backoff's partition
// not judged).
func (r *runner) prepare(j *queue.Job, out queue.Outcome, delay time.Duration, via how) (outcome, bool) {
	before, ok := r.readRow(j.ID)
	if !ok {
		return outcome{}, false
	}
	f := queue.Finish{Lease: j.Lease(), Outcome: out, Delay: delay, Workflow: j.WorkflowID != "",
		Limit: j.Limit, LimitPartition: j.LimitPartition, Queue: j.Queue, Dependents: j.Dependents}
	if via == awaiting {
		f.Await = signalName
	} else if out != queue.OutcomeComplete {
		f.Error = &queue.AttemptError{Attempt: j.Attempt, At: time.Now(), Error: "model: " + out.String(), PutBack: via == putBack || via == rateLimited}
		if via == putBack {
			f.Error.Error = "jobfence: unknown job kind (model put-back)"
		}
	}
	var bo *backoffReport
	if via == rateLimited {
		f.Backoff = delay
		if bo = r.beforeBackoff(j, delay); bo == nil {
			return outcome{}, false
		}
	}
	return outcome{j: j, out: out, f: f, before: before, bo: bo}, true
}

// judge checks the fence on an outcome the real system recorded or
// refused: a write under a claim that is no longer current must be
// refused and change nothing; one under the current claim must land.
func (r *runner) judge(p outcome, refused bool) {
	j, out, before := p.j, p.out, p.before
	after, ok := r.readRow(j.ID)
	if !ok {
		return
	}
	current := before.state == "running" && before.fence == j.Fence
	if refused {
		r.s.stats.StaleRefused++
		if current {
			r.fail("fence", "job %d: %s under the current fence %d was refused as stale (row %+v)", j.ID, out, j.Fence, before)
		} else if before != after && !granted(before, after) {
			r.fail("stale write", "job %d: refused %s under stale fence %d changed the row: %+v -> %+v", j.ID, out, j.Fence, before, after)
		}
		return
	}
	if !current {
		r.fail("stale write", "job %d: %s under fence %d was accepted, but the row was %+v", j.ID, out, j.Fence, before)
		return
	}
	if info := r.s.jobs[j.ID]; info != nil && out == queue.OutcomeSnooze && info.lastAttempt > 0 {
		info.lastAttempt-- // a snooze gives the attempt back
	}
	if p.bo != nil {
		r.s.backedOff(p.bo)
	}
}

// finishTx reports f with FinishTx in a transaction of its own and
// commits it; a stale fence comes back as queue.ErrStaleFence, the
// transaction rolled back.
func (r *runner) finishTx(f queue.Finish) error {
	ctx, cancel := r.opCtx()
	defer cancel()
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if err := r.c.FinishTx(ctx, tx, f); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
