package queue

import "context"

// InsertHook observes enqueues: a backend calls it once per enqueue call
// (one job, or all the jobs of an EnqueueMany) before it writes anything,
// and calls the returned done exactly once with how many jobs were inserted
// and the call's error. The returned context is the one the backend writes
// with; meta, when not nil, is added to the Metadata of every job of the
// call (a job's own entries win). The hook must not modify ps.
//
// Telemetry uses it to start a producer span and store its W3C traceparent
// with the jobs; a nil hook costs nothing.
type InsertHook func(ctx context.Context, ps []EnqueueParams) (hctx context.Context, meta map[string]string, done func(inserted int64, err error))

// Observe runs insert under hook (which may be nil): insert gets the
// hook's context and metadata, and the hook learns the result.
func Observe(ctx context.Context, hook InsertHook, ps []EnqueueParams, insert func(ctx context.Context, meta map[string]string) (int64, error)) (int64, error) {
	if hook == nil {
		return insert(ctx, nil)
	}
	hctx, meta, done := hook(ctx, ps)
	n, err := insert(hctx, meta)
	done(n, err)
	return n, err
}

// MergeMetadata returns own with add's entries that own lacks. It never
// modifies either map: the result is one of them when the other adds
// nothing, and a new map otherwise.
func MergeMetadata(own, add map[string]string) map[string]string {
	if len(add) == 0 {
		return own
	}
	if len(own) == 0 {
		return add
	}
	out := make(map[string]string, len(own)+len(add))
	for k, v := range add {
		out[k] = v
	}
	for k, v := range own {
		out[k] = v
	}
	return out
}
