package queue

import "context"

// PauseWatcher is implemented by backends whose queues can be paused for
// the whole fleet at once. A worker stops claiming from a paused queue (its
// running jobs finish normally) and claims again once it is resumed. A
// backend without it (kafkaqueue) has no pause: its queues always run.
type PauseWatcher interface {
	// WatchPaused returns a channel that receives the paused queues among
	// queues: once as soon as they are known, and again whenever they may
	// have changed. Each value is the whole set, so a receiver that missed
	// one loses nothing by reading the next. The channel is valid until ctx
	// ends.
	WatchPaused(ctx context.Context, queues []string) (<-chan []string, error)
}
