package worker

import (
	"log/slog"
	"sync/atomic"
)

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
	// Suspended counts the Snoozed jobs that suspended in Sleep or
	// AwaitSignal (docs/durable.md).
	Suspended int64
	// StepsRecorded counts the durable steps (Step, and the signal waits
	// that took a signal or timed out) this worker's handlers recorded;
	// StepsReplayed those that returned what an earlier attempt recorded.
	StepsRecorded, StepsReplayed int64
}

type counters struct {
	claimed, completed, retried, discarded, snoozed, unknownKind, cancelled, stale, lost, stuck, stuckRunning, panics,
	fetchErrors, finishErrors, rescued, pruned, promoted, refilled, refillErrors, endedSessions, releasedRanges,
	suspended, stepsRecorded, stepsReplayed atomic.Int64
}

func (c *counters) snapshot() Stats {
	return Stats{
		Claimed: c.claimed.Load(), Completed: c.completed.Load(), Retried: c.retried.Load(),
		Discarded: c.discarded.Load(), Snoozed: c.snoozed.Load(), UnknownKind: c.unknownKind.Load(), Cancelled: c.cancelled.Load(),
		Stale: c.stale.Load(), Lost: c.lost.Load(), Stuck: c.stuck.Load(), StuckRunning: c.stuckRunning.Load(),
		Panics: c.panics.Load(), FetchErrors: c.fetchErrors.Load(), FinishErrors: c.finishErrors.Load(),
		Rescued: c.rescued.Load(), Pruned: c.pruned.Load(), Promoted: c.promoted.Load(),
		Refilled: c.refilled.Load(), RefillErrors: c.refillErrors.Load(), EndedSessions: c.endedSessions.Load(),
		ReleasedRanges: c.releasedRanges.Load(), Suspended: c.suspended.Load(),
		StepsRecorded: c.stepsRecorded.Load(), StepsReplayed: c.stepsReplayed.Load(),
	}
}

// LogValue makes Stats a group of attributes in a log record, one per
// counter, named in snake case (stats.claimed, stats.fetch_errors), rather
// than one string of the whole struct: a log pipeline can then filter and
// sum them ("stats.panics > 0"). Every counter is there, zero or not, so
// that a record always has the same fields.
func (s Stats) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Int64("claimed", s.Claimed),
		slog.Int64("completed", s.Completed),
		slog.Int64("retried", s.Retried),
		slog.Int64("discarded", s.Discarded),
		slog.Int64("snoozed", s.Snoozed),
		slog.Int64("unknown_kind", s.UnknownKind),
		slog.Int64("cancelled", s.Cancelled),
		slog.Int64("stale", s.Stale),
		slog.Int64("lost", s.Lost),
		slog.Int64("stuck", s.Stuck),
		slog.Int64("stuck_running", s.StuckRunning),
		slog.Int64("panics", s.Panics),
		slog.Int64("fetch_errors", s.FetchErrors),
		slog.Int64("finish_errors", s.FinishErrors),
		slog.Int64("rescued", s.Rescued),
		slog.Int64("pruned", s.Pruned),
		slog.Int64("promoted", s.Promoted),
		slog.Int64("refilled", s.Refilled),
		slog.Int64("refill_errors", s.RefillErrors),
		slog.Int64("ended_sessions", s.EndedSessions),
		slog.Int64("released_ranges", s.ReleasedRanges),
		slog.Int64("suspended", s.Suspended),
		slog.Int64("steps_recorded", s.StepsRecorded),
		slog.Int64("steps_replayed", s.StepsReplayed),
	)
}
