// Package pgqueue is jobfence's PostgreSQL backend.
//
// Jobs are rows of jobfence_jobs (see package migrations). A worker claims
// up to N ready rows in one statement with FOR UPDATE SKIP LOCKED, so no two
// claimers ever get the same row, and every claim draws a new fence from the
// sequence jobfence_fence_seq. Every outcome (complete, retry, discard,
// snooze, cancel) and every lease extension is an UPDATE conditional on
// (id, fence, state = 'running'): a worker that lost its claim — its lease
// expired while it was paused and the job was rescued and claimed again —
// changes nothing and is told ErrStaleFence.
//
// Enqueue inside the caller's transaction with EnqueueTx and the job exists
// only if that transaction commits. Unique keys make an insert a no-op when
// a job with the same key is still stored.
//
// See docs/handlers.md (enqueueing), docs/pgbouncer.md and docs/operations.md.
package pgqueue
