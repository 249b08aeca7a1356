-- +goose Up
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- Compensating workflow tasks (workflow.TaskOpts.RunOnFailure, docs/workflows.md):
--
--   - run_on_failure: the task runs once its dependencies have ended only
--     if one of them was discarded or cancelled; if all completed it is
--     cancelled ("no dependency failed").
--   - dep_failed: a pending run_on_failure task has seen a dependency end
--     discarded or cancelled (its release, under the dependency's fence,
--     sets it).
--
-- Both nullable without a default, NULL for every other job: adding them
-- rewrites nothing and costs such a job nothing.
ALTER TABLE jobfence_jobs
    ADD COLUMN IF NOT EXISTS run_on_failure boolean,
    ADD COLUMN IF NOT EXISTS dep_failed     boolean;
ALTER TABLE jobfence_jobs_finished
    ADD COLUMN IF NOT EXISTS run_on_failure boolean,
    ADD COLUMN IF NOT EXISTS dep_failed     boolean;
-- jobfence_cascades: run_on_failure tasks that a completion's release
-- cancelled (no dependency failed) whose own dependents are still to be
-- cancelled (or run anyway), as any cancel's are. A completion's release
-- is one statement, often pipelined with its commit, that cannot follow
-- a cancellation through the tasks below it; it records the task here,
-- and the client that sent it cascades after the commit (a worker's
-- maintenance does, should it stop first). Deleting the row is what
-- cascades, so each is cascaded once. A new table that no one else sees
-- yet: creating it locks nothing of the fleet's.
CREATE TABLE IF NOT EXISTS jobfence_cascades (
    task_id    bigint      PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- Refused while a run_on_failure task waits: the release before this
-- migration would run it whatever its dependencies' outcome.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM jobfence_jobs WHERE state = 'pending' AND run_on_failure IS TRUE)
       OR (to_regclass('jobfence_cascades') IS NOT NULL AND EXISTS (SELECT FROM jobfence_cascades)) THEN
        RAISE EXCEPTION 'jobfence: compensating workflow tasks (RunOnFailure) still wait: let this release''s workers run them, then migrate down';
    END IF;
END $$;
-- +goose StatementEnd
DROP TABLE IF EXISTS jobfence_cascades;
ALTER TABLE jobfence_jobs DROP COLUMN IF EXISTS run_on_failure, DROP COLUMN IF EXISTS dep_failed;
ALTER TABLE jobfence_jobs_finished DROP COLUMN IF EXISTS run_on_failure, DROP COLUMN IF EXISTS dep_failed;
