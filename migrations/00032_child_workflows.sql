-- +goose NO TRANSACTION
-- +goose Up
-- Child workflows (docs/durable.md, "Child workflows"): a workflow that a
-- job started from its handler (workflow.StartChild) records that job as
-- its parent.
--
--   - parent_job_id: the job that started the workflow; NULL for every
--     other workflow. Cancelling the parent cancels the workflow, and
--     the dashboard shows the lineage, through jobfence_workflows_parent.
--   - parent_signalled_at: when the parent was told that the workflow
--     ended (the signal "jobfence:child:<id>" that its workflow.AwaitChild
--     takes), or found to need no telling (it had ended itself). While it
--     is NULL, the workflow is in jobfence_workflows_open_children, which
--     the workers' promoter sweeps: only child workflows whose parent may
--     still await them are in it, so with none the sweep is one probe of
--     an empty index, and ordinary workflows cost it nothing.
--
-- Both columns are nullable without a default: adding them rewrites
-- nothing. The indexes are built CONCURRENTLY outside a transaction (NO
-- TRANSACTION above), as in 00023: an index an interrupted build left
-- invalid is dropped first, and a small table that is not busy gets it at
-- once. Every statement may run again.
-- +goose StatementBegin
DO $$
DECLARE
    r record;
BEGIN
    SET LOCAL lock_timeout = '1s';
    ALTER TABLE jobfence_workflows
        ADD COLUMN IF NOT EXISTS parent_job_id bigint,
        ADD COLUMN IF NOT EXISTS parent_signalled_at timestamptz;
    FOR r IN
        SELECT n.nspname, c.relname
        FROM pg_index i
        JOIN pg_class c ON c.oid = i.indexrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE i.indrelid = 'jobfence_workflows'::regclass AND NOT i.indisvalid
          AND c.relname IN ('jobfence_workflows_parent', 'jobfence_workflows_open_children')
    LOOP
        EXECUTE format('DROP INDEX %I.%I', r.nspname, r.relname);
    END LOOP;
    IF (SELECT count(*) FROM (SELECT 1 FROM jobfence_workflows LIMIT 10000) s) < 10000 THEN
        BEGIN
            CREATE INDEX IF NOT EXISTS jobfence_workflows_parent ON jobfence_workflows (parent_job_id)
                WHERE parent_job_id IS NOT NULL;
            CREATE INDEX IF NOT EXISTS jobfence_workflows_open_children ON jobfence_workflows (created_at)
                WHERE parent_job_id IS NOT NULL AND parent_signalled_at IS NULL;
        EXCEPTION WHEN lock_not_available THEN
            -- A busy table: the concurrent builds below make them.
            NULL;
        END;
    END IF;
END $$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobfence_workflows_parent ON jobfence_workflows (parent_job_id)
    WHERE parent_job_id IS NOT NULL;
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobfence_workflows_open_children ON jobfence_workflows (created_at)
    WHERE parent_job_id IS NOT NULL AND parent_signalled_at IS NULL;

-- +goose Down
-- Refused while a child workflow's parent may still await it: the release
-- before this one would never tell it that the workflow ended (it would
-- wake at its wait's timeout).
-- +goose StatementBegin
DO $$
BEGIN
    SET LOCAL lock_timeout = '1s';
    IF EXISTS (SELECT FROM jobfence_workflows w JOIN jobfence_jobs j ON j.id = w.parent_job_id
               WHERE w.parent_signalled_at IS NULL
                 AND j.state NOT IN ('completed', 'discarded', 'cancelled')) THEN
        RAISE EXCEPTION 'jobfence: child workflows are awaited by jobs that have not finished: let this release''s workers finish them, then migrate down';
    END IF;
    DROP INDEX IF EXISTS jobfence_workflows_open_children;
    DROP INDEX IF EXISTS jobfence_workflows_parent;
    ALTER TABLE jobfence_workflows
        DROP COLUMN IF EXISTS parent_job_id,
        DROP COLUMN IF EXISTS parent_signalled_at;
END $$;
-- +goose StatementEnd
