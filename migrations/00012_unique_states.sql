-- +goose NO TRANSACTION
-- +goose Up
-- Uniqueness that jobfence computes (queue.UniqueOpts): a job's unique
-- hash (a SHA-256 of its kind and, as asked, its args or some of their
-- fields, its queue and its period) and the states in which it refuses a
-- duplicate, as a bitmask of queue.States() in their order (available 1,
-- scheduled 2, running 4, retryable 8, completed 16, discarded 32,
-- cancelled 64). The unique index holds a job only while its state is in
-- its own bitmask, so a completed job stops refusing duplicates unless it
-- asked to, instead of refusing them until it is pruned as unique_key does
-- (unique_key and its index keep that meaning: cron's fires need it).
--
-- jobfence_state_in_bitmask is IMMUTABLE so that an index predicate may
-- call it; inserts name the same predicate in ON CONFLICT, which is how
-- PostgreSQL picks this index as the arbiter.
--
-- Both columns are nullable without a default: adding them rewrites
-- nothing, and jobs without computed uniqueness keep NULL, outside the
-- index. The index is built CONCURRENTLY outside a transaction (NO
-- TRANSACTION above), as in 00010: an index an interrupted build left
-- invalid is dropped first, and a small table that is not busy gets it at
-- once. Every statement may run again.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION jobfence_state_in_bitmask(bitmask smallint, state text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (bitmask & CASE state
        WHEN 'available' THEN 1 WHEN 'scheduled' THEN 2 WHEN 'running' THEN 4 WHEN 'retryable' THEN 8
        WHEN 'completed' THEN 16 WHEN 'discarded' THEN 32 WHEN 'cancelled' THEN 64 ELSE 0 END) <> 0
$$;
-- +goose StatementEnd
-- +goose StatementBegin
DO $$
BEGIN
    SET LOCAL lock_timeout = '1s';
    ALTER TABLE jobfence_jobs
        ADD COLUMN IF NOT EXISTS unique_hash bytea,
        ADD COLUMN IF NOT EXISTS unique_states smallint;
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
          AND c.relname = 'jobfence_jobs_unique_hash'
    LOOP
        EXECUTE format('DROP INDEX %I.%I', r.nspname, r.relname);
    END LOOP;
    IF (SELECT count(*) FROM (SELECT 1 FROM jobfence_jobs LIMIT 10000) s) < 10000 THEN
        BEGIN
            CREATE UNIQUE INDEX IF NOT EXISTS jobfence_jobs_unique_hash ON jobfence_jobs (unique_hash)
                WHERE unique_hash IS NOT NULL AND jobfence_state_in_bitmask(unique_states, state);
        EXCEPTION WHEN lock_not_available THEN
            -- A busy table: the concurrent build below makes it.
            NULL;
        END;
    END IF;
END $$;
-- +goose StatementEnd
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS jobfence_jobs_unique_hash ON jobfence_jobs (unique_hash)
    WHERE unique_hash IS NOT NULL AND jobfence_state_in_bitmask(unique_states, state);

-- +goose Down
-- Run the release before this one first: its inserts do not write the
-- columns. Dropping a column rewrites nothing.
DROP INDEX CONCURRENTLY IF EXISTS jobfence_jobs_unique_hash;
-- +goose StatementBegin
DO $$
BEGIN
    SET LOCAL lock_timeout = '1s';
    ALTER TABLE jobfence_jobs
        DROP COLUMN IF EXISTS unique_hash,
        DROP COLUMN IF EXISTS unique_states;
END $$;
-- +goose StatementEnd
DROP FUNCTION IF EXISTS jobfence_state_in_bitmask(smallint, text);
