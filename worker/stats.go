package worker

import "sync/atomic"

// Stats counts what a worker did since it was created.
type Stats struct {
	// Claimed counts jobs claimed: by the fetch loops, by RunOne, and by
	// round trips that recorded outcomes (FinishInfo.Claimed).
	Claimed int64
	// Completed counts completions the backend applied.
	Completed int64
	// Retried counts failed attempts scheduled to run again.
	Retried int64
	// Discarded counts jobs given up on (undecodable args, or out of
	// attempts as far as this worker knew).
	Discarded int64
	// Snoozed counts jobs put back without spending an attempt.
	Snoozed int64
	// UnknownKind counts the Snoozed jobs put back because their kind has
	// no handler here.
	UnknownKind int64
	// Cancelled counts jobs cancelled by their handler.
	Cancelled int64
	// Stale counts outcomes the backend rejected because the fence was stale.
	Stale int64
	// Lost counts running jobs whose claim was lost mid-run (the handler's
	// context was cancelled with ErrLeaseLost or ErrJobCancelled).
	Lost int64
	// Stuck counts handlers the worker gave up on because they kept
	// running for Config.StuckGrace after their context ended (see
	// StuckGrace); their jobs were left to the rescuer.
	Stuck int64
	// StuckRunning is how many of the Stuck handlers have not returned
	// yet: goroutines, and whatever they hold, that the worker cannot
	// reclaim.
	StuckRunning int64
	// Panics counts recovered handler panics.
	Panics int64
	// FetchErrors counts claims that failed (the backend was unreachable).
	FetchErrors int64
	// FinishErrors counts outcome batches that had to be retried.
	FinishErrors int64
	// Rescued counts expired jobs this worker rescued.
	Rescued int64
	// Pruned counts final jobs this worker deleted.
	Pruned int64
	// Promoted counts jobs whose time had come that this worker made
	// ready to claim (see Config.PromoteInterval).
	Promoted int64
	// Refilled counts rate-limited jobs this worker granted when their
	// rate's window freed a slot; RefillErrors the grants for them that
	// failed (the grant pass tries again).
	Refilled, RefillErrors int64
	// EndedSessions counts database sessions this worker's maintenance
	// ended because they held the queue's locks while they waited, in the
	// middle of a batch, for a client that had stopped sending
	// (queue.SessionReaper).
	EndedSessions int64
	// ReleasedRanges counts ranges of workflow dependents that this
	// worker's maintenance released because the client that completed
	// their task had stopped before it released them
	// (queue.DependentReleaser).
	ReleasedRanges int64
}

type counters struct {
	claimed, completed, retried, discarded, snoozed, unknownKind, cancelled, stale, lost, stuck, stuckRunning, panics,
	fetchErrors, finishErrors, rescued, pruned, promoted, refilled, refillErrors, endedSessions, releasedRanges atomic.Int64
}

func (c *counters) snapshot() Stats {
	return Stats{
		Claimed: c.claimed.Load(), Completed: c.completed.Load(), Retried: c.retried.Load(),
		Discarded: c.discarded.Load(), Snoozed: c.snoozed.Load(), UnknownKind: c.unknownKind.Load(), Cancelled: c.cancelled.Load(),
		Stale: c.stale.Load(), Lost: c.lost.Load(), Stuck: c.stuck.Load(), StuckRunning: c.stuckRunning.Load(),
		Panics: c.panics.Load(), FetchErrors: c.fetchErrors.Load(), FinishErrors: c.finishErrors.Load(),
		Rescued: c.rescued.Load(), Pruned: c.pruned.Load(), Promoted: c.promoted.Load(),
		Refilled: c.refilled.Load(), RefillErrors: c.refillErrors.Load(), EndedSessions: c.endedSessions.Load(),
		ReleasedRanges: c.releasedRanges.Load(),
	}
}
