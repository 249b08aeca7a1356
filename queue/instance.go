package queue

import (
	"context"
	"time"
)

// Instance is what a running worker reports of itself to a Registrar.
type Instance struct {
	// ID names the instance: the worker's ID.
	ID string
	// Host and PID locate the process.
	Host string
	PID  int
	// Queues are the queues it works.
	Queues []string
	// Running is how many of its jobs are running now.
	Running int
	// Completed, Stale and Lost count, since it started, the completions
	// the backend applied, the outcomes it refused as stale, and the
	// claims lost while their jobs ran.
	Completed, Stale, Lost int64
	// StartedAt is when it started.
	StartedAt time.Time
	// Interval is how often it reports: a registry treats an instance
	// that missed a few reports as gone.
	Interval time.Duration
}

// Registrar is implemented by backends that keep a registry of the worker
// instances that are running, for operators (`jobfence workers list`, the
// dashboard). A worker reports at every heartbeat interval and deregisters
// when it stops; the backend ages out instances that stopped reporting
// (they crashed or were killed).
type Registrar interface {
	// Register records inst as alive now, replacing its previous report.
	Register(ctx context.Context, inst Instance) error
	// Deregister removes the instance id.
	Deregister(ctx context.Context, id string) error
}
