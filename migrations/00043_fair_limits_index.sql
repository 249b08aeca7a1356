-- +goose NO TRANSACTION
-- +goose Up
-- jobfence_jobs_limited_fair serves the grants of fair limits (00038): a
-- fair partition's waiting jobs by their field's value, then in insert
-- order, so that a grant finds the next values after its cursor (one
-- entry each) and each value's oldest job. Partial: only the waiting jobs
-- of fair limits are in it, so a job of another limit costs its insert
-- nothing. Built CONCURRENTLY outside a transaction (NO TRANSACTION
-- above), as in 00031: an index an interrupted build left invalid is
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
          AND c.relname = 'jobfence_jobs_limited_fair'
    LOOP
        EXECUTE format('DROP INDEX %I.%I', r.nspname, r.relname);
    END LOOP;
    IF (SELECT count(*) FROM (SELECT 1 FROM jobfence_jobs LIMIT 10000) s) < 10000 THEN
        BEGIN
            CREATE INDEX IF NOT EXISTS jobfence_jobs_limited_fair ON jobfence_jobs (limit_name, limit_part, limit_fair, id)
                WHERE state = 'limited' AND limit_fair IS NOT NULL;
        EXCEPTION WHEN lock_not_available THEN
            -- A busy table: the concurrent build below makes it.
            NULL;
        END;
    END IF;
END $$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobfence_jobs_limited_fair ON jobfence_jobs (limit_name, limit_part, limit_fair, id)
    WHERE state = 'limited' AND limit_fair IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS jobfence_jobs_limited_fair;
