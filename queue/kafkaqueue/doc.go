// Package kafkaqueue runs jobfence jobs from Kafka partitions instead of
// Postgres rows, with github.com/segmentio/kafka-go. A Client writes one
// message per job to a topic; a Backend joins a consumer group and hands the
// messages of the partitions it owns to a worker as jobs, through the same
// queue.Backend interface the Postgres backend implements, so the same
// handlers run on either.
//
// # Ownership and fence
//
// A partition has one owner in a consumer group at a time, so no lock keeps
// two workers off one job. Every job carries the group generation it was
// claimed in as its Fence. When the group rebalances (a member joins, leaves
// or misses its session timeout) the generation ends: the jobs running under
// it are cancelled (Cancelled sends their leases, Heartbeat reports them lost),
// their Finish is stale, and their messages run again at the partition's next
// owner under a higher generation. Handlers that write results make the
// writes conditional on the fence, so a paused member that wakes up after
// its partitions moved is rejected:
//
//	INSERT INTO effects (key, fence, ...) VALUES ($1, $2, ...)
//	ON CONFLICT (key) DO UPDATE SET fence = EXCLUDED.fence, ...
//	WHERE effects.fence < EXCLUDED.fence
//
// with $1 = job.IdempotencyKey(), which is "kafka:<topic>:<partition>:<offset>"
// of the message as first enqueued, and $2 = job.Fence. The fence is a
// generation of one consumer group: compare it only between jobs of the
// same group.
//
// # Offsets
//
// A partition's offset is committed only up to its first unfinished message,
// after the effects of all earlier messages are done. Finish hands the commit
// to a background committer that commits at once (Config.SyncCommit makes
// Finish wait for it instead, and report the leases stale if the broker
// refuses it). A commit refused because the generation ended stops this
// member from claiming under it at once. Delivery is therefore at least
// once: a message whose effect was done but whose offset was not committed
// when its partition moved runs again, under a higher fence, with the same
// idempotency key, which absorbs it. Such a run is not counted as an
// attempt: attempts are counted by the failures reported for a message.
//
// Attempts are counted in the member's memory and written to the message
// headers only when the job moves to the retry or dead-letter topic. After a
// rebalance the partition's next owner reads the attempt count (and the
// errors) from the headers of the message it fetches, so the in-place
// attempts the previous owner made and had not yet moved on are lost: the
// job's Attempt and Errors start again from the headers, and so do its
// in-place retries. In a group that rebalances more often than a message
// fails InPlaceRetries+1 times in a row, an always-failing message can
// therefore keep running, each generation from the same count, without
// ever reaching the retry topic or the dead-letter topic.
//
// # Order
//
// Messages with the same partition key go to the same partition and run one
// at a time in offset order, even when ConcurrencyPerPartition lets several
// messages of a partition run at once. A failed job is retried in place
// (up to Config.InPlaceRetries times, after the backoff the worker asks for)
// and holds back the later jobs of its key, so in-place retries keep the
// order. Once a job moves to the retry topic its key's later jobs run ahead
// of it: from then on the order of that key is not kept. Across a rebalance
// the new owner starts at the first uncommitted message; a revoked member
// whose handler ignores its cancelled context may still be running a job of
// the same key at that moment, which its fence makes harmless but not
// ordered.
//
// # Retries and dead letters
//
// After the in-place retries a failed job is written to the retry topic
// (topic+".retry", consumed by the same group, run no sooner than
// Config.RetryDelay later), where it again gets its in-place retries; once it
// has had MaxAttempts attempts, or when the worker discards or cancels it, it
// is written to the dead-letter topic (topic+".dlq") with its error,
// attempt count, origin and all attempts' errors in headers (see
// HeaderError and the other Header constants). A message is committed only
// after its retry or dead-letter copy is written, so nothing is dropped; a
// rebalance between the two can leave a copy in the retry topic while the
// original runs again. A copy that cannot be written is written again, with
// backoff, until it is written or the generation ends; meanwhile it holds
// back its key and its partition's commit, each failed write is logged at
// Error with the job's idempotency key, and the handler does not run again.
// A copy the topic refuses as too large is written once more without
// HeaderErrors and with HeaderError cut to 1 KiB.
//
// Client.Redrive moves dead letters back to the retry topic once their
// handler is fixed, under their original idempotency keys.
//
// # What Kafka does not give
//
// Priorities are checked but ignored, and unique keys are refused
// (ErrUniqueKeyUnsupported): Kafka cannot refuse a duplicate message.
// Limits (pgqueue's concurrency and rate limits, sequences) are refused
// (ErrLimitsUnsupported); a partition's order is the one per-key order
// Kafka gives.
// Heartbeat does not extend anything: a claim lasts as long as the member
// stays in its generation.
//
// See docs/kafka.md.
package kafkaqueue
