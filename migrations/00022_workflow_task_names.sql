-- +goose NO TRANSACTION
-- +goose Up
-- jobfence_workflow_tasks: each workflow task's name, once, for the
-- workflow's life. It replaces the unique index jobfence_jobs_workflow
-- (00016), which covered every task and so took an entry, and a check of
-- uniqueness, at every non-HOT update of a task: its release, its claim
-- and its completion (the state is in the claim index's predicate, so
-- none of them is HOT). A name is written once, when its task is
-- inserted, and deleted with its workflow (pgqueue's workflow pruner).
-- Names stay unique per workflow by this table's key, even once their
-- tasks have been pruned. A new table that no one else sees yet:
-- creating it locks nothing of the fleet's.
CREATE TABLE IF NOT EXISTS jobfence_workflow_tasks (
    workflow_id uuid   NOT NULL,
    task_name   text   NOT NULL,
    job_id      bigint NOT NULL,
    PRIMARY KEY (workflow_id, task_name)
);
-- Instances of the release before this one insert tasks without writing
-- their names: this trigger writes them, so that the names of the
-- workflows they create while the fleet is upgraded are here too. This
-- release's inserts write their tasks' names themselves (in one COPY)
-- and mark their transaction with the setting jobfence.task_names, which
-- the trigger's WHEN skips: every other job costs the trigger a test of
-- its workflow_id. The function finds the table through the search_path
-- this migration ran with, whatever the inserting session's.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION jobfence_workflow_task_named() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO jobfence_workflow_tasks (workflow_id, task_name, job_id) VALUES (NEW.workflow_id, NEW.task_name, NEW.id);
    RETURN NULL;
END $$;
-- +goose StatementEnd
-- Creating a trigger waits for the transactions writing the table, and
-- every write waits behind it: 1 s at most (see doc.go).
-- +goose StatementBegin
DO $$
BEGIN
    SET LOCAL lock_timeout = '1s';
    IF NOT EXISTS (SELECT FROM pg_trigger WHERE tgrelid = 'jobfence_jobs'::regclass AND tgname = 'jobfence_jobs_task_named') THEN
        CREATE TRIGGER jobfence_jobs_task_named AFTER INSERT ON jobfence_jobs FOR EACH ROW
            WHEN (NEW.workflow_id IS NOT NULL AND current_setting('jobfence.task_names', true) IS DISTINCT FROM 'written')
            EXECUTE FUNCTION jobfence_workflow_task_named();
    END IF;
END $$;
-- +goose StatementEnd
-- The names of the tasks inserted before the trigger, walking the jobs by
-- id, 10,000 ids per transaction and skipping the ranges that hold none;
-- a name already here (written by the trigger, or by a walk interrupted
-- and run again) is kept. A batch waits 1 s at most for a task's name
-- that an open transaction is writing.
-- +goose StatementBegin
DO $$
DECLARE
    lo bigint;
BEGIN
    SELECT min(id) INTO lo FROM jobfence_jobs;
    WHILE lo IS NOT NULL LOOP
        PERFORM set_config('lock_timeout', '1s', true);
        INSERT INTO jobfence_workflow_tasks (workflow_id, task_name, job_id)
        SELECT workflow_id, task_name, id FROM jobfence_jobs
        WHERE id >= lo AND id < lo + 10000 AND workflow_id IS NOT NULL
        ON CONFLICT DO NOTHING;
        COMMIT;
        SELECT min(id) INTO lo FROM jobfence_jobs WHERE id >= lo + 10000;
    END LOOP;
END $$;
-- +goose StatementEnd
-- Instances of the release before look tasks up by name through this
-- index: until they are upgraded, their look-ups read the table (see
-- docs/operations.md).
DROP INDEX CONCURRENTLY IF EXISTS jobfence_jobs_workflow;

-- +goose Down
-- The index first, built as 00016 builds it (the release before needs
-- it); the names it is built from are unique, as this table kept them.
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
-- +goose StatementBegin
DO $$
BEGIN
    SET LOCAL lock_timeout = '1s';
    DROP TRIGGER IF EXISTS jobfence_jobs_task_named ON jobfence_jobs;
    DROP FUNCTION IF EXISTS jobfence_workflow_task_named();
    DROP TABLE IF EXISTS jobfence_workflow_tasks;
END $$;
-- +goose StatementEnd
