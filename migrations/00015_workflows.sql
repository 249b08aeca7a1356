-- +goose Up
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- Job output and workflows (docs/workflows.md).
--
--   - output: what the handler recorded (worker.RecordOutput), written by
--     the fenced completion itself, so a stale attempt's never lands.
--   - workflow_id, task_name: the workflow a task belongs to and its name
--     there (unique per workflow: 00016's index).
--   - depends_on: the IDs of the task's dependencies; dependents: the IDs
--     of the tasks that depend on it, which the completion that ends it
--     releases (a dependency always has the smaller ID: tasks are
--     inserted after what they depend on).
--   - deps_left: the dependencies not yet done; the completion of a
--     dependency takes one off, under its fence, and makes the task
--     available at zero. Releasing costs one row per dependent, whatever
--     the size of the workflow or of the table.
--   - run_anyway: the task runs when its dependencies have ended, even if
--     one was discarded or cancelled (by default it is cancelled).
--
-- A task waiting for its dependencies is 'pending', which no claim reads
-- (jobfence_jobs_available holds available jobs only) and no promoter
-- either (jobfence_jobs_waiting holds scheduled and retryable ones).
-- Every column is nullable without a default, NULL for a job outside a
-- workflow: adding them rewrites nothing and costs such a job nothing.
ALTER TABLE jobfence_jobs
    ADD COLUMN IF NOT EXISTS output      jsonb,
    ADD COLUMN IF NOT EXISTS workflow_id uuid,
    ADD COLUMN IF NOT EXISTS task_name   text,
    ADD COLUMN IF NOT EXISTS depends_on  bigint[],
    ADD COLUMN IF NOT EXISTS dependents  bigint[],
    ADD COLUMN IF NOT EXISTS deps_left   integer,
    ADD COLUMN IF NOT EXISTS run_anyway  boolean;
-- The state check gains 'pending', beside whatever states it has (00013
-- added 'limited' the same way). The new check is added NOT VALID, which
-- does not scan the table under the lock (every row already passed the
-- stricter old check); 00016 validates it without stopping writes.
-- +goose StatementBegin
DO $$
DECLARE
    c record;
BEGIN
    FOR c IN
        SELECT conname, pg_get_constraintdef(oid) AS def FROM pg_constraint
        WHERE conrelid = 'jobfence_jobs'::regclass AND contype = 'c'
          AND pg_get_constraintdef(oid) LIKE '%''running''::text%'
          AND pg_get_constraintdef(oid) NOT LIKE '%''pending''::text%'
    LOOP
        EXECUTE format('ALTER TABLE jobfence_jobs DROP CONSTRAINT %I, ADD CONSTRAINT %I %s NOT VALID', c.conname, c.conname,
            replace(replace(c.def, ' NOT VALID', ''), '''running''::text', '''running''::text, ''pending''::text'));
    END LOOP;
END $$;
-- +goose StatementEnd
-- A unique job's bitmask of states (00012) gets pending's bit, 256, as
-- queue.stateBit has it; no row is pending before this migration, and the
-- function is otherwise unchanged (00013's), so the rows the unique index
-- holds stay as they are.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION jobfence_state_in_bitmask(bitmask smallint, state text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (bitmask & CASE state
        WHEN 'available' THEN 1 WHEN 'scheduled' THEN 2 WHEN 'running' THEN 4 WHEN 'retryable' THEN 8
        WHEN 'completed' THEN 16 WHEN 'discarded' THEN 32 WHEN 'cancelled' THEN 64 WHEN 'limited' THEN 128
        WHEN 'pending' THEN 256 ELSE 0 END) <> 0
$$;
-- +goose StatementEnd
-- One row per workflow, for listing them; its tasks are jobs.
CREATE TABLE IF NOT EXISTS jobfence_workflows (
    id         uuid        PRIMARY KEY,
    name       text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS jobfence_workflows_created ON jobfence_workflows (created_at, id);

-- +goose Down
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- Run the release before this one's workers first. The state check keeps
-- 'pending': tasks may still be in it, and an older release never writes
-- it, so the wider check costs it nothing.
DROP TABLE IF EXISTS jobfence_workflows;
ALTER TABLE jobfence_jobs
    DROP COLUMN IF EXISTS output,
    DROP COLUMN IF EXISTS workflow_id,
    DROP COLUMN IF EXISTS task_name,
    DROP COLUMN IF EXISTS depends_on,
    DROP COLUMN IF EXISTS dependents,
    DROP COLUMN IF EXISTS deps_left,
    DROP COLUMN IF EXISTS run_anyway;
