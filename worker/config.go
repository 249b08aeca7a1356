package worker

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// Config tunes a Worker. Every zero field takes the default its comment
// names, so Config{} is a working configuration.
type Config struct {
	// Queues maps each queue to work to how many of its jobs may run at
	// once. Default: {"default": 100}.
	Queues map[string]int
	// FleetQueues lets the fleet's stored settings start queues in this
	// worker that Queues does not name: a queue added for the fleet
	// (`jobfence queues add`, Client.Queues().FleetAdd) is worked here at
	// its stored concurrency. Every worker, opted in or not, follows the
	// stored concurrency of the queues it works and stops those removed
	// for the fleet (see queue.QueueWatcher). Opt in only where the
	// handlers of the kinds such queues hold are registered: a job of a
	// kind without one goes back to its queue without spending an attempt
	// (see Registry), for an instance that knows the kind. Default: false.
	FleetQueues bool
	// ID names this worker in jobs' AttemptedBy. Default: host-pid-random.
	ID string
	// Lease is how long a claim holds without a heartbeat. A worker that is
	// paused or cut off for longer loses its jobs to the rescuer, and its
	// late outcomes are stale. Default: 30s.
	Lease time.Duration
	// HeartbeatInterval is how often running jobs' leases are extended,
	// and how often the worker reports itself to a backend that keeps a
	// registry of live instances (queue.Registrar; `jobfence workers
	// list`). Default: Lease/3.
	HeartbeatInterval time.Duration
	// JobTimeout bounds one attempt unless the job's own Timeout (its
	// insert's, or its args type's: queue.InsertOptsProvider) or the
	// kind's HandlerOptions say otherwise; negative means no timeout. A
	// job's Deadline ends its attempt too, if it comes first. Default: 1m.
	JobTimeout time.Duration
	// StuckGrace is how long a handler may keep running after its context
	// ended (its timeout passed, its job was lost or cancelled, or Stop's
	// deadline passed) before the worker gives up on it: a handler that
	// ignores its context (a read with no deadline, a deadlock, cgo)
	// cannot be stopped, and heartbeats would otherwise keep its job
	// running for ever. The worker then stops extending the job's lease,
	// so the rescuer of any instance takes the job back once the lease
	// runs out and spends the attempt; it counts the handler in
	// Stats.Stuck and logs it; it lets the handler's slot go to a new
	// runner, for at most as many stuck handlers per queue as the queue's
	// concurrency (past that, a stuck handler keeps its slot, so a queue
	// whose handlers all hang stops claiming rather than piling up
	// goroutines). If the handler ever returns, its outcome is recorded
	// under its old fence: refused as stale once the job was claimed
	// again. A handler with no timeout is never given up on while its
	// context lives: the worker cannot tell a long job from a stuck one.
	// The check runs at each heartbeat, so a handler is given up on
	// between StuckGrace and StuckGrace+HeartbeatInterval after its
	// context ended. Default: Lease/6 (5s with the default lease).
	StuckGrace time.Duration
	// FetchLimit caps how many jobs one claim takes; a claim never takes
	// more than the free slots. Default: 1000.
	FetchLimit int
	// Fetchers is how many claim loops each queue runs side by side. The
	// first claims whenever a quarter of a batch of slots is free; the
	// others claim beside it only while its claims are quick (under
	// 100 µs a job), overlapping round trips for a worker that one loop
	// cannot keep busy. The claims of a fleet of instances are slower
	// (each skips the rows the others' claims hold), and there one claim
	// in flight per instance is cheaper for all.
	// Default: 2.
	Fetchers int
	// Completers is how many outcome batches may be in flight at once.
	// Default: 2.
	Completers int
	// PollInterval is how often an idle queue is polled when no wake-up
	// arrives (a lost LISTEN, a poll-only backend, a backend without
	// wake-ups). A queue whose last claim found jobs is polled again after
	// PollInterval/16 (at least 10ms), and the wait doubles with each empty
	// claim back to PollInterval. Default: 1s.
	PollInterval time.Duration
	// RetryPolicy decides when failed jobs run again. Default:
	// ExponentialRetry{}.
	RetryPolicy RetryPolicy
	// MaxOutputBytes caps the JSON a handler may record with
	// RecordOutput. Default: queue.MaxOutputBytes (1 MiB).
	MaxOutputBytes int
	// MaxProgressBytes caps the JSON a handler may report with Progress.
	// Default: DefaultMaxProgressBytes (4 KiB).
	MaxProgressBytes int
	// ProgressInterval is the least time between two writes of one job's
	// progress (Progress): calls in between keep only their latest value,
	// written once the interval has passed or before the attempt's
	// outcome, whichever comes first. Default: DefaultProgressInterval
	// (1s).
	ProgressInterval time.Duration
	// AttemptLogs bounds the records handlers write through Logger that
	// are stored with their attempts; see LogsConfig for its defaults.
	AttemptLogs LogsConfig
	// FinishBatch caps how many outcomes go to the backend in one round
	// trip. Default: 1000.
	FinishBatch int
	// PromoteInterval is how often this worker makes jobs whose time has
	// come (scheduled, retrying after a backoff, snoozed) ready to claim,
	// on a backend that needs it (queue.Promoter, such as pgqueue). Any
	// instance may; none leads. A job with a time of its own so starts up
	// to about PromoteInterval after that time (a retry too, even with no
	// backoff); one enqueued to run now, and one put back without a delay,
	// is ready at once.
	// Promotion runs even with DisableMaintenance: without it such jobs
	// would never run. Default: 1s.
	PromoteInterval time.Duration
	// RescueInterval is how often this worker rescues jobs whose lease
	// expired (any instance may; none leads), so a lost job waits at most
	// about Lease + RescueInterval. Default: Lease/2.
	RescueInterval time.Duration
	// PruneInterval is how often final jobs older than Retention are
	// deleted, and, with a backend that keeps finished jobs in partitions
	// (queue.FinishedMaintainer: pgqueue), how often partitions are made
	// ahead and those past Retention dropped. Default: 1m.
	PruneInterval time.Duration
	// Retention is how long final jobs are kept. Default: 24h. Under
	// queue.MinFinishedRetention (a minute), pgqueue keeps completed jobs
	// in the jobs table, deleted row by row, rather than in partitions
	// dropped whole (docs/operations.md, "Finished jobs").
	Retention time.Duration
	// RetentionByState keeps completed, cancelled and discarded jobs for
	// periods of their own (keep discarded ones a month, for a
	// post-mortem, while completed ones go after a day). Each zero field
	// is Retention: the zero value keeps every final job for Retention.
	// Completed jobs in pgqueue's finished partitions go with their
	// partition, after Completed; the others are deleted row by row,
	// each after its state's. A backend without per-state pruning
	// (queue.StatePruner) prunes every state after the longest.
	RetentionByState queue.Retention
	// DisableMaintenance turns off rescuing and pruning in this worker
	// (not promotion: see PromoteInterval).
	DisableMaintenance bool
	// Middleware wraps every handler, outermost first. A transactional
	// (AddTx) handler's middleware runs inside its transaction, before the
	// fenced completion.
	Middleware []Middleware
	// Hooks observe the worker's jobs and round trips; see Hooks.
	Hooks Hooks
	// Logger receives the worker's logs. Default: slog.Default().
	Logger *slog.Logger
	// Encryption opens the args of jobs stored encrypted (see
	// queue.KeyRing and docs/encryption.md) before the middleware and the
	// handler see them. A job whose args name a key the ring lacks, or
	// that does not authenticate under it, never reaches its handler: its
	// attempt fails with a queue.KeyError (errors.Is ErrEncryptionKey) and
	// it is retried by the retry policy as any failure is, so a deploy
	// that brings the key runs it. Nil: such a job fails the same way.
	Encryption *queue.KeyRing
}

func (c Config) withDefaults() Config {
	if len(c.Queues) == 0 {
		c.Queues = map[string]int{"default": 100}
	}
	if c.ID == "" {
		host, _ := os.Hostname()
		b := make([]byte, 3)
		_, _ = rand.Read(b)
		c.ID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
	}
	if c.Lease <= 0 {
		c.Lease = 30 * time.Second
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = c.Lease / 3
	}
	if c.JobTimeout == 0 {
		c.JobTimeout = time.Minute
	}
	if c.StuckGrace <= 0 {
		c.StuckGrace = c.Lease / 6
	}
	if c.FetchLimit <= 0 {
		c.FetchLimit = 1000
	}
	if c.Fetchers <= 0 {
		c.Fetchers = 2
	}
	if c.Completers <= 0 {
		c.Completers = 2
	}
	if c.PollInterval <= 0 {
		c.PollInterval = time.Second
	}
	if c.RetryPolicy == nil {
		c.RetryPolicy = ExponentialRetry{}
	}
	if c.MaxOutputBytes <= 0 {
		c.MaxOutputBytes = queue.MaxOutputBytes
	}
	if c.MaxProgressBytes <= 0 {
		c.MaxProgressBytes = DefaultMaxProgressBytes
	}
	if c.ProgressInterval <= 0 {
		c.ProgressInterval = DefaultProgressInterval
	}
	c.AttemptLogs = c.AttemptLogs.withDefaults()
	if c.FinishBatch <= 0 {
		c.FinishBatch = 1000
	}
	if c.PromoteInterval <= 0 {
		c.PromoteInterval = time.Second
	}
	if c.RescueInterval <= 0 {
		c.RescueInterval = c.Lease / 2
	}
	if c.PruneInterval <= 0 {
		c.PruneInterval = time.Minute
	}
	if c.Retention <= 0 {
		c.Retention = 24 * time.Hour
	}
	c.RetentionByState = c.RetentionByState.WithDefault(c.Retention)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	for q, n := range c.Queues {
		if q == "" {
			return fmt.Errorf("jobfence: worker config: empty queue name")
		}
		if n <= 0 {
			return fmt.Errorf("jobfence: worker config: queue %q: concurrency %d must be positive", q, n)
		}
	}
	if c.HeartbeatInterval >= c.Lease {
		return fmt.Errorf("jobfence: worker config: HeartbeatInterval %s must be shorter than Lease %s", c.HeartbeatInterval, c.Lease)
	}
	return nil
}
