package queue

import (
	"encoding/json"
	"fmt"
	"time"
)

// Args is implemented by a job's typed arguments: Kind names the handler
// that runs them, and the value itself is stored as JSON.
type Args interface {
	Kind() string
}

// InsertOpts are the optional settings of a typed insert; the zero value
// takes every default of EnqueueParams.
type InsertOpts struct {
	Queue       string
	Priority    int
	ScheduledAt time.Time
	MaxAttempts int
	UniqueKey   string
	Metadata    map[string]string
}

// Params encodes args as JSON and returns the EnqueueParams of a job of
// kind args.Kind() with opts applied (opts may be nil).
func Params(args Args, opts *InsertOpts) (EnqueueParams, error) {
	b, err := json.Marshal(args)
	if err != nil {
		return EnqueueParams{}, fmt.Errorf("jobfence: encode args of kind %q: %w", args.Kind(), err)
	}
	p := EnqueueParams{Kind: args.Kind(), Args: b}
	if opts != nil {
		p.Queue = opts.Queue
		p.Priority = opts.Priority
		p.ScheduledAt = opts.ScheduledAt
		p.MaxAttempts = opts.MaxAttempts
		p.UniqueKey = opts.UniqueKey
		p.Metadata = opts.Metadata
	}
	return p, nil
}
