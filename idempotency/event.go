package idempotency

import "context"

// EventKind is what happened to a key in one call of Do or DoTx.
type EventKind int

// The events Options.OnEvent receives.
const (
	// EventRun: the caller took a free key and runs fn.
	EventRun EventKind = iota + 1
	// EventTakeover: the caller took over a key whose holder's lease ran
	// out (or that had expired) and runs fn under a greater fence. It is a
	// run too.
	EventTakeover
	// EventReplay: the key was completed; the stored response is returned
	// and fn does not run.
	EventReplay
	// EventKeyReused: the key was used with another fingerprint
	// (ErrKeyReused).
	EventKeyReused
	// EventInProgress: another caller holds the key; the call returns
	// ErrInProgress, or with WaitForInProgress starts waiting.
	EventInProgress
)

func (k EventKind) String() string {
	switch k {
	case EventRun:
		return "run"
	case EventTakeover:
		return "takeover"
	case EventReplay:
		return "replay"
	case EventKeyReused:
		return "key_reused"
	case EventInProgress:
		return "in_progress"
	}
	return "unknown"
}

// Event is one thing that happened to a key; see Options.OnEvent.
type Event struct {
	Kind  EventKind
	Scope string
	Key   string
}

// event reports an event to Options.OnEvent, if set.
func (s *Store) event(ctx context.Context, kind EventKind, key string) {
	if s.opts.OnEvent != nil {
		s.opts.OnEvent(ctx, Event{Kind: kind, Scope: s.opts.Scope, Key: key})
	}
}
