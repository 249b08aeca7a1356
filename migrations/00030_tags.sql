-- +goose Up
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- Job tags (queue.EnqueueParams.Tags, docs/operations.md "Finding
-- jobs"): a job's labels for the people who look for it. Nullable
-- without a default, NULL for a job without tags: adding it rewrites
-- nothing, and such a job pays nothing for it. jobfence_jobs_finished
-- takes it too: a completed job moves there with its tags.
ALTER TABLE jobfence_jobs ADD COLUMN IF NOT EXISTS tags text[];
ALTER TABLE jobfence_jobs_finished ADD COLUMN IF NOT EXISTS tags text[];

-- +goose Down
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
ALTER TABLE jobfence_jobs DROP COLUMN IF EXISTS tags;
ALTER TABLE jobfence_jobs_finished DROP COLUMN IF EXISTS tags;
