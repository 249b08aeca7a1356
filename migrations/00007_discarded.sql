-- +goose NO TRANSACTION
-- +goose Up
-- Serves the dashboard's overview and /metrics: discarded jobs per queue,
-- counted without visiting the completed jobs that surround them (the
-- finalized index holds every final job). Only a job that becomes
-- discarded enters it, so the claim and the completion pay nothing for it.
--
-- Built CONCURRENTLY outside a transaction (NO TRANSACTION above), as in
-- 00006: an index an interrupted build left invalid is dropped first, and
-- a small table that is not busy gets it at once. Every statement may run
-- again.
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
          AND c.relname = 'jobfence_jobs_discarded'
    LOOP
        EXECUTE format('DROP INDEX %I.%I', r.nspname, r.relname);
    END LOOP;
    IF (SELECT count(*) FROM (SELECT 1 FROM jobfence_jobs LIMIT 10000) s) < 10000 THEN
        BEGIN
            CREATE INDEX IF NOT EXISTS jobfence_jobs_discarded ON jobfence_jobs (queue, id) WHERE state = 'discarded';
        EXCEPTION WHEN lock_not_available THEN
            -- A busy table: the concurrent build below makes it.
            NULL;
        END;
    END IF;
END $$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobfence_jobs_discarded ON jobfence_jobs (queue, id) WHERE state = 'discarded';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS jobfence_jobs_discarded;
