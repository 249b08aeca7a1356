package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// completer sends outcomes to the backend in batches: it takes whatever has
// queued up since the last round trip, so batches grow with load and an
// idle worker reports at once.
func (w *Worker) completer() {
	defer w.finishWG.Done()
	batch := make([]pending, 0, w.cfg.FinishBatch)
	for p := range w.finishCh {
		batch = append(batch[:0], p)
	drain:
		for len(batch) < w.cfg.FinishBatch {
			select {
			case p, ok := <-w.finishCh:
				if !ok {
					break drain
				}
				batch = append(batch, p)
			default:
				break drain
			}
		}
		w.flush(batch, true)
		// Until now the jobs stayed tracked, so heartbeats kept their
		// leases while the outcomes waited.
		for _, p := range batch {
			w.untrack(p.r)
		}
	}
}

// flush reports a batch, after storing its attempts' logs, retrying
// while the backend is unreachable. It gives up after the lease has surely
// run out (the jobs are the rescuer's by then, and an outcome would be
// stale anyway), or after one last try once Stop's deadline has passed.
//
// With claim, on a queue.FinishClaimer, the outcomes of limited jobs whose
// queue has a free slot for one more job ask for the job their freed limit
// slot goes to (queue.Finish.ClaimNext): it comes back claimed with the
// outcomes and goes straight to a runner (see reserveNext), rather than
// being made available to wake a fetch loop that claims it.
func (w *Worker) flush(batch []pending, claim bool) {
	// The attempts' logs first, once, in one round trip for the batch:
	// stored while their jobs still run under their fences.
	w.recordLogs(batch)
	fs := make([]queue.Finish, len(batch))
	for i, p := range batch {
		fs[i] = p.f
	}
	var fc queue.FinishClaimer
	var reserved map[*queueFetch]int
	var slots queue.Slots
	if claim {
		if fc, _ = w.backend.(queue.FinishClaimer); fc != nil {
			reserved = w.reserveNext(batch, fs)
			if releasesDependents(fs) {
				slots = workerSlots{w}
			}
		}
	}
	deadline := time.Now().Add(w.cfg.Lease + w.cfg.HeartbeatInterval)
	backoff := 50 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Lease)
		sent := time.Now()
		var stale []queue.Lease
		var next []*queue.Job
		var err error
		if len(reserved) > 0 || slots != nil {
			stale, next, err = fc.FinishClaim(ctx, fs, queue.FinishClaimParams{Lease: w.cfg.Lease, WorkerID: w.cfg.ID,
				Slots: slots, DependencyTraces: w.cfg.Hooks.TaskTrace != nil})
		} else {
			stale, err = w.backend.Finish(ctx, fs)
		}
		cancel()
		took := time.Since(sent)
		if w.cfg.Hooks.Finish != nil {
			w.cfg.Hooks.Finish(context.Background(), FinishInfo{Jobs: len(fs), Stale: len(stale), Claimed: len(next), Duration: took, Err: err})
		}
		if err == nil {
			byQueue := jobsByQueue(next)
			// Reported before the runners get the jobs, as a fetch loop's
			// claim is: a hook never hears of a claim after its jobs ran.
			w.reportClaims(reserved, byQueue, took)
			w.handOver(reserved, byQueue, sent)
			w.count(batch, fs, stale)
			return
		}
		w.stats.finishErrors.Add(1)
		giveUp := false
		select {
		case <-w.giveUp:
			giveUp = true
		default:
			giveUp = time.Now().After(deadline)
		}
		if giveUp {
			w.handOver(reserved, nil, sent)
			w.log.Error("jobfence: cannot record outcomes; their jobs will be rescued when the lease expires",
				"jobs", len(fs), "err", err)
			for _, p := range batch {
				w.ended(p.r, JobEnd{Outcome: p.outcome, Lost: true})
			}
			return
		}
		w.log.Error("jobfence: cannot record outcomes; retrying", "jobs", len(fs), "err", err, "retry_in", backoff)
		select {
		case <-time.After(backoff):
		case <-w.giveUp:
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

// count updates the counters for a recorded batch and reports each job's
// end.
func (w *Worker) count(batch []pending, fs []queue.Finish, stale []queue.Lease) {
	var staleSet map[queue.Lease]bool
	if len(stale) > 0 {
		staleSet = make(map[queue.Lease]bool, len(stale))
		for _, l := range stale {
			staleSet[l] = true
		}
	}
	completed := 0
	for i, f := range fs {
		p := batch[i]
		if staleSet[f.Lease] {
			w.logJob(p.r.ctx, slog.LevelWarn, "jobfence: outcome rejected: stale fence (the job was claimed again by another owner)", p.r.job)
		} else if f.Outcome == queue.OutcomeComplete {
			completed++
		}
		w.ended(p.r, JobEnd{Outcome: p.outcome, Stale: staleSet[f.Lease]})
	}
	w.stats.stale.Add(int64(len(stale)))
	w.stats.completed.Add(int64(completed))
}

// reserveNext reserves, for each outcome of batch whose job held a limit
// slot, a slot of its queue for the job that limit slot goes to next, and
// marks the outcome in fs to claim it (ClaimNext); it returns the slots
// reserved per queue. An outcome whose queue has no slot free, is paused,
// or has stopped fetching claims nothing: its next job is made available
// for any claim, as without a FinishClaimer.
func (w *Worker) reserveNext(batch []pending, fs []queue.Finish) map[*queueFetch]int {
	var reserved map[*queueFetch]int
	for i, p := range batch {
		if fs[i].Limit == "" {
			continue
		}
		// The job's own queue: a queue's fetch state is kept once made,
		// removed or not (a removed queue has no slot free).
		if f := p.r.fetch; f != nil && f.reserve() {
			if reserved == nil {
				reserved = map[*queueFetch]int{}
			}
			reserved[f]++
			fs[i].ClaimNext = true
		}
	}
	return reserved
}

// releasesDependents reports whether fs complete a workflow task that
// some task depends on: its release may claim them for this worker
// (queue.FinishClaimParams.Slots).
func releasesDependents(fs []queue.Finish) bool {
	for _, f := range fs {
		if f.Workflow && f.Outcome == queue.OutcomeComplete && f.Dependents > 0 {
			return true
		}
	}
	return false
}

// workerSlots is the worker's queue.Slots: the slots of its queues' fetch
// loops, reserved as reserveNext reserves them and filled as a
// FinishClaim's claimed jobs are handed over.
type workerSlots struct{ w *Worker }

// Reserve implements queue.Slots.
func (s workerSlots) Reserve(q string, n int) int {
	s.w.mu.Lock()
	f := s.w.fetches[q]
	s.w.mu.Unlock()
	if f == nil {
		return 0
	}
	return f.reserveUpTo(n)
}

// Fill implements queue.Slots: the jobs go to the runners as a
// FinishClaim's do, counted and reported to the Claim hook as claimed.
func (s workerSlots) Fill(q string, n int, jobs []*queue.Job, until time.Time) {
	s.w.mu.Lock()
	f := s.w.fetches[q]
	s.w.mu.Unlock()
	if f == nil || n <= 0 {
		return
	}
	jobs = jobs[:min(len(jobs), n)]
	if h := s.w.cfg.Hooks.Claim; h != nil {
		h(context.Background(), ClaimInfo{Queue: q, Jobs: len(jobs), Finish: true})
	}
	s.w.stats.claimed.Add(int64(len(jobs)))
	f.handOver(n, jobs, until)
}

// jobsByQueue groups jobs by their queue: nil for none, as after most
// batches of outcomes, which claim nothing.
func jobsByQueue(jobs []*queue.Job) map[string][]*queue.Job {
	if len(jobs) == 0 {
		return nil
	}
	byQueue := map[string][]*queue.Job{}
	for _, j := range jobs {
		byQueue[j.Queue] = append(byQueue[j.Queue], j)
	}
	return byQueue
}

// handOver gives the runners the jobs, by queue, that a FinishClaim sent
// at sent claimed (none when it failed), and frees the reserved slots
// they did not fill. Their lease holds at least until sent+Lease by this
// worker's clock.
func (w *Worker) handOver(reserved map[*queueFetch]int, byQueue map[string][]*queue.Job, sent time.Time) {
	for _, jobs := range byQueue {
		w.stats.claimed.Add(int64(len(jobs)))
	}
	for f, n := range reserved {
		f.handOver(n, byQueue[f.name], sent.Add(w.cfg.Lease))
	}
}

// reportClaims reports to the Claim hook, for each queue a FinishClaim
// that took took reserved slots in, the jobs it claimed there (none
// included, as a fetch loop's empty claim is), so that whatever counts
// claims through the hook counts the jobs outcomes claim as well.
func (w *Worker) reportClaims(reserved map[*queueFetch]int, byQueue map[string][]*queue.Job, took time.Duration) {
	if w.cfg.Hooks.Claim == nil {
		return
	}
	for f := range reserved {
		w.cfg.Hooks.Claim(context.Background(), ClaimInfo{Queue: f.name, Jobs: len(byQueue[f.name]), Duration: took, Finish: true})
	}
}
