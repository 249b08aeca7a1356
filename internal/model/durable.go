package model

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// Durable jobs in the model: a claim records steps and signal waits
// (pgqueue's RecordStep and AwaitSignal, as worker.Step and AwaitSignal
// call them), suspends (a snooze with a timer that may await a signal:
// Sleep's and AwaitSignal's outcome, the state machine's "suspend"), and
// an operator sends signals ("signal"). The rules checked:
//
//   - step: a record under the current fence lands, and its row holds
//     the output it returned (its own, or an earlier record's: a step is
//     recorded once); a record under a stale fence is refused and leaves
//     no row of its fence; so does a wait's.
//   - signal: each signal is delivered to one wait at most, each wait
//     takes one signal at most and records the payload it took, and a
//     suspended job whose awaited signal is there is not left waiting
//     after a signal's wake and a promote (a lost wake-up).

// signalName is the one signal the model's jobs await.
const signalName = "go"

// stepOp records step "s<N%3>" of a live claim, with output N.
func (r *runner) stepOp(op Op) {
	claims, _ := r.s.liveClaims()
	if len(claims) == 0 {
		return
	}
	r.recordStep(claims[op.Pick%len(claims)], "s"+strconv.Itoa(op.N%3), op.N)
}

// recordStep records step name of claim j with output out and checks it
// against the fence the job's row held before.
func (r *runner) recordStep(j *queue.Job, name string, out int) {
	before, ok := r.readRow(j.ID)
	if !ok {
		return
	}
	rows, ok := r.stepRows(j.ID, name)
	if !ok {
		return
	}
	ctx, cancel := r.opCtx()
	got, err := r.c.RecordStep(ctx, nil, j.Lease(), name, []byte(strconv.Itoa(out)))
	cancel()
	current := before.state == "running" && before.fence == j.Fence
	if errors.Is(err, queue.ErrStaleFence) {
		r.s.stats.StaleRefused++
		if current {
			r.fail("fence", "job %d: step %s under the current fence %d was refused as stale", j.ID, name, j.Fence)
			return
		}
		r.unchanged(j, name, rows)
		return
	}
	if !r.called(fmt.Sprintf("RecordStep %s of job %d fence %d", name, j.ID, j.Fence), err, nil) {
		return
	}
	if !current {
		r.fail("stale write", "job %d: step %s under fence %d was recorded, but the row was %+v", j.ID, name, j.Fence, before)
		return
	}
	ctx, cancel = r.opCtx()
	defer cancel()
	var stored string
	var fence int64
	err = r.admin.QueryRow(ctx, `SELECT output::text, fence FROM jobfence_steps WHERE job_id = $1 AND name = $2`, j.ID, name).Scan(&stored, &fence)
	if !r.called("read step", err, nil) {
		return
	}
	if stored != string(got) || fence > j.Fence {
		r.fail("step", "job %d: step %s returned %s under fence %d, but its row holds %s of fence %d", j.ID, name, got, j.Fence, stored, fence)
	}
}

// stepRows reads the rows of job id's step name (and of a wait's timer,
// name:wait), as one string to compare.
func (r *runner) stepRows(id int64, name string) (string, bool) {
	ctx, cancel := r.opCtx()
	defer cancel()
	var rows string
	err := r.admin.QueryRow(ctx, `SELECT coalesce(string_agg(name || '=' || output::text || '@' || fence, ' ' ORDER BY name), '')
        FROM jobfence_steps WHERE job_id = $1 AND (name = $2 OR name = $2 || ':wait')`, id, name).Scan(&rows)
	return rows, r.called("read steps", err, nil)
}

// unchanged checks that claim j's record of step name, refused as stale,
// left its rows as they were (before).
func (r *runner) unchanged(j *queue.Job, name, before string) {
	after, ok := r.stepRows(j.ID, name)
	if ok && after != before {
		r.fail("stale write", "job %d: step %s refused as stale under fence %d changed its rows: %q -> %q", j.ID, name, j.Fence, before, after)
	}
}

// awaitOp is a live claim's signal wait, for Ms (+1) milliseconds: it
// takes a signal, times out, or suspends the job awaiting one, as
// AwaitSignal does. A claim's n-th wait is the job's (waits+1)-th.
func (r *runner) awaitOp(op Op) {
	claims, by := r.s.liveClaims()
	if len(claims) == 0 {
		return
	}
	i := op.Pick % len(claims)
	j, o := claims[i], by[i]
	info := r.s.jobs[j.ID]
	if info == nil {
		return
	}
	before, ok := r.readRow(j.ID)
	if !ok {
		return
	}
	key := fmt.Sprintf("jobfence:signal:%s#%d", signalName, info.waits+1)
	rows, ok := r.stepRows(j.ID, key)
	if !ok {
		return
	}
	ctx, cancel := r.opCtx()
	out, until, now, err := r.c.AwaitSignal(ctx, j.Lease(), key, signalName, time.Duration(op.Ms+1)*time.Millisecond)
	cancel()
	current := before.state == "running" && before.fence == j.Fence
	if errors.Is(err, queue.ErrStaleFence) {
		r.s.stats.StaleRefused++
		if current {
			r.fail("fence", "job %d: wait %s under the current fence %d was refused as stale", j.ID, key, j.Fence)
			return
		}
		r.unchanged(j, key, rows)
		return
	}
	if !r.called(fmt.Sprintf("AwaitSignal %s of job %d fence %d", key, j.ID, j.Fence), err, nil) {
		return
	}
	if !current {
		r.fail("stale write", "job %d: wait %s under fence %d applied, but the row was %+v", j.ID, key, j.Fence, before)
		return
	}
	if out != nil {
		info.waits++
		return
	}
	r.s.stats.Suspended++
	r.finish(o, j, queue.OutcomeSnooze, max(until.Sub(now), time.Microsecond), awaiting)
}

// signalOp sends the signal to job Pick (Flag: a workflow task) and
// checks that a job suspended awaiting it does not stay so.
func (r *runner) signalOp(op Op) {
	j := r.s.pickJob(op.Pick, op.Flag)
	if j == nil {
		return
	}
	ctx, cancel := r.opCtx()
	err := r.c.Signal(ctx, j.id, signalName, op.N)
	cancel()
	if !r.called("Signal", err, func(err error) bool { return errors.Is(err, pgqueue.ErrJobFinished) }) {
		return
	}
	r.s.stats.Signals++
	// Signal's own promote may skip a row another session holds (SKIP
	// LOCKED: none here but the open append's); the promoter's next pass
	// must not.
	r.promote()
	if r.v != nil {
		return
	}
	ctx, cancel = r.opCtx()
	defer cancel()
	var lost bool
	err = r.admin.QueryRow(ctx, `SELECT EXISTS (SELECT FROM jobfence_jobs j WHERE j.id = $1 AND j.state = 'scheduled' AND j.awaiting = $2
        AND EXISTS (SELECT FROM jobfence_signals g WHERE g.job_id = j.id AND g.name = $2 AND g.delivered_at IS NULL))`, j.id, signalName).Scan(&lost)
	if r.called("read the signalled job", err, nil) && lost {
		r.fail("signal", "job %d still awaits signal %q after it was sent and the promoter ran", j.id, signalName)
	}
}

// checkSignals checks the signals and the waits that took them: each
// signal delivered to one wait at most, each wait holding one signal at
// most, and each delivered signal recorded by its wait (but where a
// forced retry of a completed job forgot its steps).
func (r *runner) checkSignals() {
	ctx, cancel := r.opCtx()
	defer cancel()
	var twice, unrecorded, phantom string
	err := r.admin.QueryRow(ctx, `SELECT
        coalesce((SELECT string_agg(job_id || ':' || delivered_to, ' ') FROM (
            SELECT job_id, delivered_to FROM jobfence_signals WHERE delivered_at IS NOT NULL
            GROUP BY 1, 2 HAVING count(*) > 1) d), ''),
        coalesce((SELECT string_agg(g.id::text, ' ') FROM jobfence_signals g
            WHERE g.delivered_at IS NOT NULL AND NOT (g.job_id = ANY ($1::bigint[])) AND NOT EXISTS (
                SELECT FROM jobfence_steps s WHERE s.job_id = g.job_id AND s.name = g.delivered_to
                  AND s.output = jsonb_build_object('signal', g.payload))), ''),
        coalesce((SELECT string_agg(s.job_id || ':' || s.name, ' ') FROM jobfence_steps s
            WHERE s.output ? 'signal' AND NOT EXISTS (
                SELECT FROM jobfence_signals g WHERE g.job_id = s.job_id AND g.delivered_to = s.name)), '')`,
		r.s.forgotten()).Scan(&twice, &unrecorded, &phantom)
	if !r.called("read signals", err, nil) {
		return
	}
	switch {
	case twice != "":
		r.fail("signal", "waits took more than one signal each: %s", twice)
	case unrecorded != "":
		r.fail("signal", "signals delivered but recorded by no wait (lost): %s", unrecorded)
	case phantom != "":
		r.fail("signal", "waits recorded a signal that was never delivered to them: %s", phantom)
	}
}

// forgotten are the jobs a forced retry may have brought back from
// completed, forgetting their steps.
func (s *state) forgotten() []int64 {
	ids := []int64{}
	for id, j := range s.jobs {
		if j.forced {
			ids = append(ids, id)
		}
	}
	return ids
}
