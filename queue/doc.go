// Package queue holds jobfence's backend-neutral job types: the Job a worker
// receives, its states, the parameters of an enqueue, the fenced outcomes a
// worker reports, the errors callers test for, and the Backend interface that
// the worker drives. Backends live in subpackages (pgqueue, kafkaqueue); this
// package imports none of them.
//
// A claim hands a job to one owner together with a fence, a number that only
// grows. Every outcome a worker reports carries that fence, and a backend
// applies it only while the fence is still the job's current one; an owner
// that lost the job (its lease expired and another claimed it) gets
// ErrStaleFence and changes nothing.
//
// See docs/guarantees.md for what a lease, a fence and a put-back promise.
package queue
