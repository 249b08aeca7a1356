package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// ErrNoJob is returned by RunOne when its queue has no job ready to run.
var ErrNoJob = errors.New("jobfence: no job ready to run")

// ErrStarted is returned by RunOne on a worker that Start started: its
// fetch loops and completers own the claims and outcomes.
var ErrStarted = errors.New("jobfence: worker already started")

// Ran is what became of the one job RunOne ran.
type Ran struct {
	// Job is the job as claimed: its Attempt and Fence are this attempt's.
	Job *queue.Job
	// Outcome is the outcome the worker recorded under the claim's fence,
	// or zero when the handler ended after the job was lost (its lease ran
	// out or it was cancelled) and nothing was recorded.
	Outcome queue.Outcome
	// Delay is how long a retried or snoozed job waits before it is ready
	// again, by the database's clock.
	Delay time.Duration
	// Err is the handler's error as it returned it (so errors.Is and
	// errors.As work on it), or the reason for a put-back; nil when the
	// job completed.
	Err error
	// Stale reports that the outcome changed nothing because the claim's
	// fence was no longer current (a transactional handler's writes were
	// rolled back with it), or that the job was lost before any outcome.
	Stale bool
}

// RunOne claims one ready job of queue q under a new fence and runs it
// synchronously through the path a started worker takes: its handler with
// the timeout, the middleware and panic recovery, a transactional handler
// in its transaction with the fenced completion, and the outcome recorded
// under the fence. Heartbeats do not run, so the handler must finish within
// the lease (Config.Lease); past it, its context is cancelled as it would
// be in a worker whose heartbeats fail.
//
// RunOne claims from q even when q is paused (queue.PauseWatcher): the
// call is the operator's explicit request.
//
// RunOne exists for tests (see package jobfencetest) and one-off tools. It
// returns ErrNoJob when no job of q is ready and ErrStarted on a started
// worker; calls to it are serialised.
func (w *Worker) RunOne(ctx context.Context, q string) (*Ran, error) {
	w.mu.Lock()
	started := w.started
	w.mu.Unlock()
	if started {
		return nil, fmt.Errorf("jobfence: worker: run one: %w", ErrStarted)
	}
	w.one.Lock()
	defer w.one.Unlock()
	if err := w.checkBackend(ctx); err != nil {
		return nil, err
	}
	// A job whose time has come must be found without a started worker's
	// promoter (see queue.Promoter).
	if p, ok := w.backend.(queue.Promoter); ok {
		n, err := p.Promote(ctx, promoteBatch)
		if err != nil {
			return nil, fmt.Errorf("jobfence: worker: run one: %w", err)
		}
		for _, k := range n {
			w.stats.promoted.Add(int64(k))
		}
	}
	// So must a limited job whose slot is free (see queue.Granter).
	if g, ok := w.backend.(queue.Granter); ok {
		if _, err := g.GrantWaiting(ctx, promoteBatch); err != nil {
			return nil, fmt.Errorf("jobfence: worker: run one: %w", err)
		}
	}
	claimStart := time.Now()
	jobs, err := w.backend.Claim(ctx, w.claimParams(q, 1))
	if w.cfg.Hooks.Claim != nil {
		w.cfg.Hooks.Claim(ctx, ClaimInfo{Queue: q, Jobs: len(jobs), Duration: time.Since(claimStart), Err: err})
	}
	if err != nil {
		return nil, fmt.Errorf("jobfence: worker: run one: claim from queue %q: %w", q, err)
	}
	if len(jobs) == 0 {
		return nil, fmt.Errorf("jobfence: worker: run one: queue %q: %w", q, ErrNoJob)
	}
	w.stats.claimed.Add(1)
	job := jobs[0]
	// Counters tell a transactional handler's outcome, settled inside
	// execute, from a lost job's: nothing else touches them meanwhile.
	before := w.stats.snapshot()
	w.execute(nil, job, claimStart.Add(w.cfg.Lease))
	ran := &Ran{Job: job}
	select {
	case p := <-w.finishCh:
		w.flush([]pending{p}, false)
		w.untrack(p.r)
		ran.Outcome, ran.Delay, ran.Err = p.f.Outcome, p.f.Delay, p.r.err
		ran.Stale = w.stats.stale.Load() > before.Stale
	default:
		after := w.stats.snapshot()
		switch {
		case after.Completed > before.Completed:
			ran.Outcome = queue.OutcomeComplete
		case after.Stale > before.Stale:
			ran.Outcome, ran.Stale = queue.OutcomeComplete, true
		default:
			ran.Stale = true
		}
	}
	return ran, nil
}
