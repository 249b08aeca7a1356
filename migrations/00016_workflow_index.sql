-- +goose NO TRANSACTION
-- +goose Up
-- Serves a task's look-up by name within its workflow (workflow.Output,
-- `jobfence workflows show`) and keeps task names unique per workflow.
-- Only workflow tasks are in it: every other job costs it nothing. Built
-- CONCURRENTLY outside a transaction (NO TRANSACTION above), as in 00007:
-- an index an interrupted build left invalid is dropped first, and a small
-- table that is not busy gets it at once. Every statement may run again.
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
          AND c.relname = 'jobfence_jobs_workflow'
    LOOP
        EXECUTE format('DROP INDEX %I.%I', r.nspname, r.relname);
    END LOOP;
    IF (SELECT count(*) FROM (SELECT 1 FROM jobfence_jobs LIMIT 10000) s) < 10000 THEN
        BEGIN
            CREATE UNIQUE INDEX IF NOT EXISTS jobfence_jobs_workflow ON jobfence_jobs (workflow_id, task_name)
                WHERE workflow_id IS NOT NULL;
        EXCEPTION WHEN lock_not_available THEN
            -- A busy table: the concurrent build below makes it.
            NULL;
        END;
    END IF;
END $$;
-- +goose StatementEnd
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS jobfence_jobs_workflow ON jobfence_jobs (workflow_id, task_name)
    WHERE workflow_id IS NOT NULL;
-- 00015 added the state check NOT VALID; validating it reads the table
-- under a lock that lets reads and writes go on.
-- +goose StatementBegin
DO $$
DECLARE
    c record;
BEGIN
    SET LOCAL lock_timeout = '1s';
    FOR c IN
        SELECT conname FROM pg_constraint
        WHERE conrelid = 'jobfence_jobs'::regclass AND contype = 'c' AND NOT convalidated
          AND pg_get_constraintdef(oid) LIKE '%''pending''::text%'
    LOOP
        EXECUTE format('ALTER TABLE jobfence_jobs VALIDATE CONSTRAINT %I', c.conname);
    END LOOP;
END $$;
-- +goose StatementEnd

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS jobfence_jobs_workflow;
