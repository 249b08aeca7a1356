-- +goose Up
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- run_trace: the W3C traceparent of the attempt whose fenced completion
-- ended a workflow task (queue.Finish.Trace), written by that completion
-- only, so that its dependents' attempt spans link to it
-- (queue.Job.DependencyTraces; docs/workflows.md). Nullable without a
-- default: adding it rewrites nothing, and a job outside a workflow, or
-- run without telemetry, stores none.
ALTER TABLE jobfence_jobs ADD COLUMN IF NOT EXISTS run_trace bytea;

-- +goose Down
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- Run the release before this one's workers first.
ALTER TABLE jobfence_jobs DROP COLUMN IF EXISTS run_trace;
