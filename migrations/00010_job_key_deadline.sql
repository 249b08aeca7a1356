-- +goose NO TRANSACTION
-- +goose Up
-- Three nullable columns of a job, each NULL for a job that has none, and
-- so free for it (a bit of the row's null bitmap); adding a nullable
-- column without a default rewrites nothing.
--
--   - idempotency_key: a random UUID drawn by the inserting client
--     (pgqueue), from which Job.IdempotencyKey() is "jobfence-<uuid>",
--     unique across databases; the key that was "jobfence-job-<id>" was
--     the same for different jobs of different databases (a staging and a
--     production database sharing a payment provider's account). A job
--     inserted before this migration keeps NULL, and its old key, so that
--     its retries send the key its earlier attempts sent: the column is
--     never backfilled.
--   - deadline: when the job must have ended by (EnqueueParams.Deadline).
--   - timeout_us: the job's own bound on each attempt, in microseconds
--     (EnqueueParams.Timeout; negative: none).
--
-- jobfence_jobs_deadline serves the promoter's discard of the waiting and
-- available jobs whose deadline has passed. Only such jobs with a
-- deadline are in it: jobs without one, and running or final ones, cost
-- it nothing. It is built CONCURRENTLY outside a transaction (NO
-- TRANSACTION above), as in 00007: an index an interrupted build left
-- invalid is dropped first, and a small table that is not busy gets it at
-- once. Every statement may run again.
-- +goose StatementBegin
DO $$
BEGIN
    SET LOCAL lock_timeout = '1s';
    ALTER TABLE jobfence_jobs
        ADD COLUMN IF NOT EXISTS idempotency_key uuid,
        ADD COLUMN IF NOT EXISTS deadline timestamptz,
        ADD COLUMN IF NOT EXISTS timeout_us bigint;
END $$;
-- +goose StatementEnd
-- +goose StatementBegin
DO $$
DECLARE
    r record;
BEGIN
    SET LOCAL lock_timeout = '1s';
    FOR r IN
        SELECT n.nspname, c.relname
        FROM pg_index i
        JOIN pg_class c ON c.oid = i.indexrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE i.indrelid = 'jobfence_jobs'::regclass AND NOT i.indisvalid
          AND c.relname = 'jobfence_jobs_deadline'
    LOOP
        EXECUTE format('DROP INDEX %I.%I', r.nspname, r.relname);
    END LOOP;
    IF (SELECT count(*) FROM (SELECT 1 FROM jobfence_jobs LIMIT 10000) s) < 10000 THEN
        BEGIN
            CREATE INDEX IF NOT EXISTS jobfence_jobs_deadline ON jobfence_jobs (deadline)
                WHERE deadline IS NOT NULL AND state IN ('available', 'scheduled', 'retryable');
        EXCEPTION WHEN lock_not_available THEN
            -- A busy table: the concurrent build below makes it.
            NULL;
        END;
    END IF;
END $$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobfence_jobs_deadline ON jobfence_jobs (deadline)
    WHERE deadline IS NOT NULL AND state IN ('available', 'scheduled', 'retryable');

-- +goose Down
-- Run the release before this one's workers first: this release's
-- claims read the columns. Dropping a column rewrites nothing.
DROP INDEX CONCURRENTLY IF EXISTS jobfence_jobs_deadline;
-- +goose StatementBegin
DO $$
BEGIN
    SET LOCAL lock_timeout = '1s';
    ALTER TABLE jobfence_jobs
        DROP COLUMN IF EXISTS idempotency_key,
        DROP COLUMN IF EXISTS deadline,
        DROP COLUMN IF EXISTS timeout_us;
END $$;
-- +goose StatementEnd
