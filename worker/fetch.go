package worker

import (
	"cmp"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// queueFetch is what the fetch loops and runners of one queue share.
type queueFetch struct {
	name   string
	paused *gate
	// taken counts the queue's slots taken: jobs claimed, or about to
	// be, and not yet ended. size is the queue's concurrency now; it
	// changes while the worker runs (Worker.SetQueue), and a slot is
	// taken only while taken < size, so shrinking cancels nothing: it
	// stops claims until enough running jobs have ended. A removed queue
	// has size 0.
	taken, size atomic.Int64
	// resize serialises changes of size with runners, the queue's
	// runners counted: there are never fewer runners than size (grown
	// before size), and a runner leaves after a job while there are more
	// (see leaveIfSpare).
	resize  sync.Mutex
	runners atomic.Int64
	// loops counts the fetch loops started, at most Config.Fetchers and
	// the largest size the queue has had; loopsWG waits for them before
	// out is closed. Guarded by Worker.mu.
	loops   int
	loopsWG sync.WaitGroup
	// emptied, when not nil, is closed once taken is back to 0 (see
	// waitEmpty). Guarded by resize.
	emptied chan struct{}
	// listed is set while the queue is worked (size > 0 by the worker's
	// choice), so that it is reported to the registry; stopWake ends its
	// wake-up subscription. Guarded by Worker.mu.
	listed   bool
	stopWake context.CancelFunc
	// freed tells the lead loop, and helped the helper loops, that slots
	// came free (a job ended, or a claim found fewer jobs than it
	// reserved slots for). Each side has a channel of its own, so that
	// one never takes the signal the other waits for.
	freed, helped chan struct{}
	// fast is set while the lead loop's last claim found a useful batch
	// of jobs in less than helperMaxPerJob a job: the helpers claim too.
	fast atomic.Bool
	// out takes claimed jobs to the runners.
	out chan claimed
	// wake is the backend's wake-up, poke this worker's promoter's. wake
	// changes when a removed queue is added again: read it with wakeCh.
	wake atomic.Pointer[<-chan struct{}]
	poke chan struct{}
	// stuckFreed counts the queue's stuck handlers, still running, whose
	// slots went to new runners (see Worker.abandonRun). Guarded by
	// Worker.mu.
	stuckFreed int
	// handoff keeps out open while the completer hands it jobs that its
	// outcomes claimed (Worker.reserveNext): out is closed once the
	// fetch loops have stopped (closing) and no such claim is in flight.
	handoff struct {
		sync.Mutex
		inFlight int
		closing  bool
	}
}

func newQueueFetch(name string, concurrency int, paused *gate, wake <-chan struct{}) *queueFetch {
	f := &queueFetch{
		name: name, paused: paused,
		freed: make(chan struct{}, 1), helped: make(chan struct{}, 1),
		out:  make(chan claimed, concurrency),
		poke: make(chan struct{}, 1),
	}
	f.setWake(wake)
	return f
}

// setWake makes ch the queue's wake-up channel.
func (f *queueFetch) setWake(ch <-chan struct{}) { f.wake.Store(&ch) }

// wakeCh returns the queue's wake-up channel (nil: none).
func (f *queueFetch) wakeCh() <-chan struct{} { return *f.wake.Load() }

// pokeNow wakes the queue's fetch loops: jobs were made ready.
func (f *queueFetch) pokeNow() {
	select {
	case f.poke <- struct{}{}:
	default:
	}
}

// take takes up to n free slots and returns how many it took.
func (f *queueFetch) take(n int) int {
	for {
		t := f.taken.Load()
		k := min(int64(n), f.size.Load()-t)
		if k <= 0 {
			return 0
		}
		if f.taken.CompareAndSwap(t, t+k) {
			return int(k)
		}
	}
}

// give frees k slots taken.
func (f *queueFetch) give(k int) {
	if k <= 0 {
		return
	}
	if f.taken.Add(-int64(k)) == 0 {
		f.resize.Lock()
		if f.emptied != nil {
			close(f.emptied)
			f.emptied = nil
		}
		f.resize.Unlock()
	}
}

// waitEmpty waits, within ctx, until no slot of the queue is taken.
func (f *queueFetch) waitEmpty(ctx context.Context) error {
	f.resize.Lock()
	if f.taken.Load() == 0 {
		f.resize.Unlock()
		return nil
	}
	if f.emptied == nil {
		f.emptied = make(chan struct{})
	}
	ch := f.emptied
	f.resize.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// release frees one slot, when a runner is done with a job.
func (f *queueFetch) release() {
	f.give(1)
	f.signal()
}

// reserve takes a slot for a job that the completer's outcomes may claim
// (Worker.reserveNext); it reports false while the queue is paused, once
// its fetch loops have stopped (Stop), or when no slot is free.
func (f *queueFetch) reserve() bool {
	return f.reserveUpTo(1) == 1
}

// reserveUpTo takes up to n slots as reserve does, for jobs that a
// backend is about to claim for this worker, and returns how many it took.
func (f *queueFetch) reserveUpTo(n int) int {
	f.handoff.Lock()
	defer f.handoff.Unlock()
	if f.handoff.closing || f.paused.wait() != nil {
		return 0
	}
	k := f.take(n)
	f.handoff.inFlight += k
	return k
}

// handOver gives the runners jobs claimed into n reserved slots, frees
// the slots they did not fill, and closes out if the fetch loops have
// stopped and this was the last claim in flight. The backend claims no
// more jobs than slots were reserved; should it, the extra ones are not
// run here and are rescued when their lease expires, rather than block
// on a full out.
func (f *queueFetch) handOver(n int, jobs []*queue.Job, until time.Time) {
	f.handoff.Lock()
	defer f.handoff.Unlock()
	jobs = jobs[:min(len(jobs), n)]
	for _, j := range jobs {
		// A slot is reserved for each job, and a runner is free for each
		// slot (runners are never fewer than size): at most a moment's wait.
		f.out <- claimed{job: j, until: until}
	}
	if unused := n - len(jobs); unused > 0 {
		f.give(unused)
		f.signal()
	}
	f.handoff.inFlight -= n
	if f.handoff.closing && f.handoff.inFlight == 0 {
		close(f.out)
	}
}

// closeOut closes out, the runners' channel, once the fetch loops have
// stopped: at once, or when the last claim in flight is handed over.
func (f *queueFetch) closeOut() {
	f.handoff.Lock()
	defer f.handoff.Unlock()
	f.handoff.closing = true
	if f.handoff.inFlight == 0 {
		close(f.out)
	}
}

// signal tells the waiting loops that slots came free.
func (f *queueFetch) signal() {
	select {
	case f.freed <- struct{}{}:
	default:
	}
	select {
	case f.helped <- struct{}{}:
	default:
	}
}

// helperMaxPerJob is the claim time per job under which a queue's helper
// loops claim beside its lead. A claim's time per job grows with the
// claims of other workers, each skipping the rows the others hold: one
// worker's claims stay well under it, a fleet's go well over it (figures
// in docs/benchmarks/fleet.md).
const helperMaxPerJob = 100 * time.Microsecond

// fetchLoop claims jobs of queue f while its slots have room and its
// pause gate lets it.
//
// The first loop of a queue (the lead) claims whenever a useful batch of
// slots is free, and polls. The others (helpers, Config.Fetchers beyond
// the first) claim beside it only while its claims find a useful batch
// quickly (helperMaxPerJob): then a worker that one loop cannot keep busy
// overlaps round trips. When claims are slow because many workers claim,
// as in a fleet of instances, one claim more per instance would only add
// to what every claim waits for; the helpers wait, and claims stay one
// per instance and queue.
func (w *Worker) fetchLoop(ctx context.Context, f *queueFetch, helper bool) {
	defer w.fetchWG.Done()
	backoff := 50 * time.Millisecond
	// force claims whatever is free after a wake-up or a poll interval,
	// so slots below the threshold do not idle while jobs are ready.
	force := false
	// The poll adapts to load: a queue whose last claim found jobs is
	// polled again after minPoll, and each empty claim doubles the wait up
	// to PollInterval. Without wake-ups (pgqueue.Config.PollOnly, behind
	// PgBouncer) jobs of a busy queue then wait about minPoll, while an
	// idle fleet sends a claim per PollInterval per loop.
	minPoll := min(w.cfg.PollInterval, max(w.cfg.PollInterval/16, 10*time.Millisecond))
	wait := w.cfg.PollInterval
	// One timer for every wait: a wait begins each time a job ends while
	// the slots are full, thousands of times a second.
	poll := time.NewTimer(wait)
	defer poll.Stop()
	for {
		// A loop that keeps finding free slots and ready jobs never waits:
		// Stop must still end it.
		if ctx.Err() != nil {
			return
		}
		if resumed := f.paused.wait(); resumed != nil {
			select {
			case <-ctx.Done():
				return
			case <-resumed:
				force = true
			}
			continue
		}
		// The queue's size changes while it runs (Worker.SetQueue): read
		// it at each turn. Claiming a handful of jobs at a time wastes
		// round trips when many slots turn over: wait until a useful
		// batch of slots is free.
		n := int(f.size.Load())
		threshold := max(1, min(n, w.cfg.FetchLimit)/4)
		free := n - int(f.taken.Load())
		switch {
		case n == 0:
			// Removed: nothing to claim until it is added again, which
			// signals.
			ch := f.freed
			if helper {
				ch = f.helped
			}
			select {
			case <-ctx.Done():
				return
			case <-ch:
			}
			continue
		case helper && (free < threshold || !f.fast.Load()):
			select {
			case <-ctx.Done():
				return
			case <-f.helped:
			}
			continue
		case !helper && (free <= 0 || (free < threshold && !force)):
			poll.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-f.freed:
			case <-f.wakeCh():
				force = true
			case <-f.poke:
				force = true
			case <-poll.C:
				force = true
			}
			continue
		}
		force = false
		limit := min(free, w.cfg.FetchLimit)
		// Reserve the slots before claiming so side-by-side loops never
		// claim more than the queue's concurrency.
		reserved := f.take(limit)
		if reserved == 0 {
			continue
		}
		limit = reserved
		// The claim is not cut off by Stop: a claim whose rows were taken
		// but whose reply was dropped would leave them to the rescuer.
		// Jobs it returns go to the runners, which drain before Stop ends.
		claimCtx, cancelClaim := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.Lease)
		claimStart := time.Now()
		jobs, err := w.backend.Claim(claimCtx, w.claimParams(f.name, limit))
		cancelClaim()
		took := time.Since(claimStart)
		if w.cfg.Hooks.Claim != nil {
			w.cfg.Hooks.Claim(ctx, ClaimInfo{Queue: f.name, Jobs: len(jobs), Duration: took, Err: err})
		}
		if !helper {
			perJob := cmp.Or(w.helperMaxPerJob, helperMaxPerJob)
			f.fast.Store(len(jobs) >= threshold && took < time.Duration(len(jobs))*perJob)
		}
		if unused := limit - len(jobs); unused > 0 {
			f.give(unused)
			f.signal()
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.stats.fetchErrors.Add(1)
			w.log.Error("jobfence: cannot claim jobs; retrying", "queue", f.name, "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		if len(jobs) > 0 {
			wait = minPoll
		} else {
			wait = min(2*wait, w.cfg.PollInterval)
		}
		w.stats.claimed.Add(int64(len(jobs)))
		// The lease as this worker's clock sees it: claimed no earlier
		// than claimStart, so it holds at least until claimStart+Lease.
		until := claimStart.Add(w.cfg.Lease)
		for _, j := range jobs {
			f.out <- claimed{job: j, until: until} // a slot is reserved and a runner free for each job
		}
		if len(jobs) == limit || helper {
			continue
		}
		poll.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-f.wakeCh():
		case <-f.poke:
		case <-poll.C:
		}
	}
}

// claimParams is what a claim of up to limit jobs of queue q asks. The
// traces of a workflow task's dependencies are read only for a worker
// whose Hooks.TaskTrace is set: telemetry, which links a task's attempt to
// theirs, sets it, and without it the read is a probe per dependency for
// nothing.
func (w *Worker) claimParams(q string, limit int) queue.ClaimParams {
	return queue.ClaimParams{Queue: q, Limit: limit, Lease: w.cfg.Lease, WorkerID: w.cfg.ID, DependencyTraces: w.cfg.Hooks.TaskTrace != nil}
}
