-- +goose NO TRANSACTION
-- +goose Up
-- queue.EnqueueParams.DeleteOnComplete: the fenced completion deletes the
-- job's row instead of keeping it (its output is not kept either), for
-- users who keep nothing of a finished job. NULL (keep) for every job
-- that did not ask: a nullable column without a default rewrites nothing
-- and costs such a job nothing (a bit of the row's null bitmap). Every
-- statement may run again.
-- +goose StatementBegin
DO $$
BEGIN
    SET LOCAL lock_timeout = '1s';
    ALTER TABLE jobfence_jobs ADD COLUMN IF NOT EXISTS delete_on_complete boolean;
END $$;
-- +goose StatementEnd

-- +goose Down
-- Run the release before this one's workers first: this release's inserts
-- write the column. Dropping a column rewrites nothing.
-- +goose StatementBegin
DO $$
BEGIN
    SET LOCAL lock_timeout = '1s';
    ALTER TABLE jobfence_jobs DROP COLUMN IF EXISTS delete_on_complete;
END $$;
-- +goose StatementEnd
