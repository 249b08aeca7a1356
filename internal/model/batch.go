package model

import (
	"fmt"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// batchOutcomes are the outcomes a batch handler's result slice gives
// its jobs, picked per job from Op.Pick.
var batchOutcomes = []queue.Outcome{queue.OutcomeComplete, queue.OutcomeRetry, queue.OutcomeSnooze, queue.OutcomeDiscard, queue.OutcomeCancel}

// batchOp: owner o claims up to N jobs of Queue, as a worker running a
// batch handler does (a batch claim is N claims: each job its own fence,
// lease, attempt, slot), and reports the outcomes of every claim it
// holds, this claim's and any earlier one's (among them claims that
// expired and were claimed again: stale members), in one Finish, as the
// completer writes a batch's results. Each outcome is judged alone: a
// stale member's is refused and changes nothing, the current ones land.
// A frozen owner writes nothing.
func (r *runner) batchOp(op Op) {
	o := op.Owner % owners
	if r.s.owners[o].frozen {
		return
	}
	r.claim(o, world[op.Queue%len(world)].name, max(1, op.N))
	if r.v != nil {
		return
	}
	claims := append([]*queue.Job(nil), r.s.owners[o].claims...)
	if len(claims) == 0 {
		return
	}
	var ps []outcome
	var fs []queue.Finish
	pick := op.Pick
	for _, j := range claims {
		out := batchOutcomes[pick%len(batchOutcomes)]
		pick = pick/len(batchOutcomes) + 7*int(j.ID)
		r.s.drop(o, j)
		var delay time.Duration
		if out == queue.OutcomeRetry || out == queue.OutcomeSnooze {
			delay = time.Duration(op.Ms) * time.Millisecond
		}
		p, ok := r.prepare(j, out, delay, batch)
		if !ok {
			r.s.abandoned = append(r.s.abandoned, j)
			continue
		}
		ps = append(ps, p)
		fs = append(fs, p.f)
	}
	if len(fs) == 0 {
		return
	}
	ctx, cancel := r.opCtx()
	stale, err := r.c.Finish(ctx, fs)
	cancel()
	if !r.called(fmt.Sprintf("Finish of a batch of %d", len(fs)), err, nil) {
		for _, p := range ps {
			r.s.abandoned = append(r.s.abandoned, p.j)
		}
		return
	}
	refused := make(map[queue.Lease]bool, len(stale))
	for _, l := range stale {
		refused[l] = true
	}
	r.s.stats.Batches++
	for _, p := range ps {
		r.judge(p, refused[p.f.Lease])
		if r.v != nil {
			return
		}
	}
}
