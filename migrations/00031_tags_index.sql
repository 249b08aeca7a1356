-- +goose NO TRANSACTION
-- +goose Up
-- Serves a search by tag (pgqueue's ListParams.Tag): a GIN index of the
-- jobs' tags, partial so that a job without tags (NULL) costs its insert
-- nothing. Built CONCURRENTLY outside a transaction (NO TRANSACTION
-- above), as in 00007: an index an interrupted build left invalid is
-- dropped first, and a small table that is not busy gets it at once.
-- Every statement may run again.
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
          AND c.relname = 'jobfence_jobs_tags'
    LOOP
        EXECUTE format('DROP INDEX %I.%I', r.nspname, r.relname);
    END LOOP;
    IF (SELECT count(*) FROM (SELECT 1 FROM jobfence_jobs LIMIT 10000) s) < 10000 THEN
        BEGIN
            CREATE INDEX IF NOT EXISTS jobfence_jobs_tags ON jobfence_jobs USING gin (tags) WHERE tags IS NOT NULL;
        EXCEPTION WHEN lock_not_available THEN
            -- A busy table: the concurrent build below makes it.
            NULL;
        END;
    END IF;
END $$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobfence_jobs_tags ON jobfence_jobs USING gin (tags) WHERE tags IS NOT NULL;
-- The finished jobs' partitions: PostgreSQL builds no index of a
-- partitioned table concurrently, and a plain build would hold off the
-- completions that move rows into the current partition for as long as
-- it reads it. So the index is declared on the parent ONLY (at once, no
-- partition read): every partition that maintenance creates from now on
-- gets it when it is attached, empty, and the partitions already there
-- (none of which has it) are dropped within a retention. Until then a
-- tag search reads those partitions' rows (see ListParams.Tag).
-- +goose StatementBegin
DO $$
BEGIN
    SET LOCAL lock_timeout = '1s';
    CREATE INDEX IF NOT EXISTS jobfence_jobs_finished_tags ON ONLY jobfence_jobs_finished USING gin (tags) WHERE tags IS NOT NULL;
END $$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    SET LOCAL lock_timeout = '1s';
    DROP INDEX IF EXISTS jobfence_jobs_finished_tags;
END $$;
-- +goose StatementEnd
DROP INDEX CONCURRENTLY IF EXISTS jobfence_jobs_tags;
