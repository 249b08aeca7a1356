// Package worker is the job runtime a service embeds: a registry of typed
// handlers, per-queue concurrency, a fetch loop that claims jobs in batches,
// heartbeats that keep leases alive and cancel a handler the moment its job
// is lost, job timeouts, panic recovery, retries with backoff, batched
// fenced completions and a graceful Stop that drains. A handler that
// ignores its context once it ends (its timeout, a lost job, Stop) cannot be
// stopped, but it holds nothing for long: after Config.StuckGrace the worker
// gives up on it (Stats.Stuck), stops extending its lease so that the
// rescuer takes the job back, lets its slot go, and never makes Stop wait
// for it.
//
// The worker drives any queue.Backend: pgqueue for PostgreSQL, kafkaqueue
// for Kafka. Handlers do not change between them. Backends may offer more,
// which the worker uses when they do: wake-ups (queue.Waker), cancellation
// of running jobs (queue.Canceller), upkeep (queue.Maintainer), queues
// paused for the whole fleet, from which it claims nothing until they are
// resumed (queue.PauseWatcher), and a registry of live instances to which
// it reports at every heartbeat interval (queue.Registrar).
//
// Every outcome the worker reports carries the claim's fence, so a worker
// that was paused past its lease and woke up changes nothing: its outcome is
// counted as stale and logged. A handler's own writes are protected the same
// way by AddTx (its writes and the fenced completion commit in one
// transaction) or by fencing them with job.Fence. A batch handler (AddBatch)
// gets many jobs of its kind in one call, each with its own claim, fence
// and outcome.
//
// See docs/handlers.md for handlers, transactions and stopping, and
// docs/guarantees.md for what a lease and a put-back promise.
package worker
