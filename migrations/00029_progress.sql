-- +goose Up
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- A running job's progress (worker.Progress, docs/durable.md): a small
-- JSON value its handler writes, throttled and under its fence, while it
-- runs, read by Get, `jobfence jobs show` and the dashboard, and kept
-- after the job ends. jobfence_jobs_finished has it too: a completion
-- that moves the row there carries it (pgqueue's finishedColumns).
--
-- Nullable without a default, NULL for every job that never reports
-- progress: adding it rewrites nothing and costs such a job nothing.
ALTER TABLE jobfence_jobs ADD COLUMN IF NOT EXISTS progress jsonb;
ALTER TABLE jobfence_jobs_finished ADD COLUMN IF NOT EXISTS progress jsonb;

-- +goose Down
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- The progress recorded is lost; nothing else reads it.
ALTER TABLE jobfence_jobs DROP COLUMN IF EXISTS progress;
ALTER TABLE jobfence_jobs_finished DROP COLUMN IF EXISTS progress;
