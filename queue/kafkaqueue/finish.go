package kafkaqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// Finish applies outcomes of jobs whose generation is still current and
// returns the others as stale. OutcomeComplete marks the message done, and
// the partition's offset is committed up to the first unfinished message, so
// a commit never passes a message whose effect is not done; the commit is
// made at once in the background, or before Finish returns with
// Config.SyncCommit. OutcomeRetry runs the job again in place after f.Delay up
// to Config.InPlaceRetries times, then writes it to the retry topic, and
// writes it to the dead-letter topic once it has had MaxAttempts attempts.
// OutcomeDiscard and OutcomeCancel write it to the dead-letter topic. A
// retry or dead-letter copy that cannot be written is written again in the
// background until it is; the job does not run again meanwhile.
// OutcomeSnooze runs it again after f.Delay without spending an attempt.
//
// With Config.SyncCommit, a lease whose outcome was applied is still returned
// as stale when the broker refuses the commit because the generation ended
// meanwhile: the message will be delivered again to the partition's next
// owner. A commit that fails for another reason (a timeout, a coordinator
// that moved) is logged and left to the background committer: Finish
// returns no error, since the outcomes are applied. Without SyncCommit, a
// refused background commit ends the generation here at once (its running
// jobs are cancelled and their Finish is stale).
func (b *Backend) Finish(ctx context.Context, fs []queue.Finish) ([]queue.Lease, error) {
	for _, f := range fs {
		if f.Outcome < queue.OutcomeComplete || f.Outcome > queue.OutcomeCancel {
			return nil, fmt.Errorf("kafkaqueue: finish job %d: unknown outcome %d", f.ID, f.Outcome)
		}
	}
	now := time.Now()
	var (
		stale   []queue.Lease
		applied []queue.Lease
		g       *generation
		outE    []*entry
	)
	b.mu.Lock()
	for _, f := range fs {
		e := b.running[f.ID]
		if e == nil || !b.current(e, f.Fence) {
			stale = append(stale, f.Lease)
			continue
		}
		delete(b.running, f.ID)
		p := e.part
		p.running--
		e.jobID = 0
		g = p.gen
		applied = append(applied, f.Lease)
		switch f.Outcome {
		case queue.OutcomeComplete:
			p.done(e)
		case queue.OutcomeSnooze:
			e.state = statePending
			e.notBefore = now.Add(f.Delay)
		case queue.OutcomeRetry:
			e.attempt++
			e.errs = append(e.errs, attemptError(f, e.attempt, now))
			switch {
			case e.attempt >= e.meta.maxAttempts:
				e.out = b.deadLetter(e, f.Outcome, now)
				outE = append(outE, e)
			case e.inPlace < b.cfg.InPlaceRetries:
				e.inPlace++
				e.state = statePending
				e.notBefore = now.Add(f.Delay)
			default:
				e.out = b.retry(e, now.Add(max(b.cfg.RetryDelay, f.Delay)))
				outE = append(outE, e)
			}
		case queue.OutcomeDiscard, queue.OutcomeCancel:
			e.attempt++
			e.errs = append(e.errs, attemptError(f, e.attempt, now))
			e.out = b.deadLetter(e, f.Outcome, now)
			outE = append(outE, e)
		}
		b.notify(p.queue)
	}
	for _, e := range outE {
		e.state = stateHandoff
	}
	b.mu.Unlock()

	if len(outE) > 0 {
		b.handOff(ctx, outE)
	}
	if g == nil {
		return stale, nil
	}
	if !b.cfg.SyncCommit {
		b.kickCommit()
		return stale, nil
	}
	if err := b.commit(g); err != nil {
		if isGenerationError(err) {
			b.endGeneration(g, "commit refused")
		}
		if b.ended(g) {
			return append(stale, applied...), nil
		}
		// The outcomes are applied: Finish did its part, and the background
		// committer retries the commit now and every CommitInterval.
		b.log.Warn("kafkaqueue: commit failed; the background committer retries it",
			"group", b.cfg.GroupID, "generation", g.id, "err", err)
		b.kickCommit()
	}
	return stale, nil
}

// kickCommit asks the background committer to commit now; a request
// already pending covers this one.
func (b *Backend) kickCommit() {
	select {
	case b.commitKick <- struct{}{}:
	default:
	}
}

func attemptError(f queue.Finish, attempt int, now time.Time) queue.AttemptError {
	if f.Error != nil {
		ae := *f.Error
		if ae.Attempt == 0 {
			ae.Attempt = attempt
		}
		if ae.At.IsZero() {
			ae.At = now
		}
		return ae
	}
	return queue.AttemptError{Attempt: attempt, At: now, Error: "outcome " + f.Outcome.String()}
}
