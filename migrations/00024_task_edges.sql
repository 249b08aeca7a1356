-- +goose Up
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- jobfence_task_edges: the dependencies of tasks appended to a running
-- workflow (workflow.Append) on tasks that were there before. The append
-- writes them here rather than into the dependency's row (its
-- dependents): a caller's transaction that held that row until its commit
-- held up every statement of the fleet that writes it, the heartbeat of
-- the worker running the task first. A row here is taken once its
-- dependency has ended, by the promoter's sweep (pgqueue's
-- releaseAppendedSQL), which releases the dependent when counted (the
-- append counted the dependency in its deps_left) and lists it in the
-- dependency's dependents; deleting the row is what makes that release
-- happen once. A new table that no one else sees yet: creating it locks
-- nothing of the fleet's.
CREATE TABLE IF NOT EXISTS jobfence_task_edges (
    dependency bigint      NOT NULL,
    dependent  bigint      NOT NULL,
    counted    boolean     NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (dependency, dependent)
);
-- RetryWorkflow rewrites the edges of the tasks it counts anew.
CREATE INDEX IF NOT EXISTS jobfence_task_edges_dependent ON jobfence_task_edges (dependent);
-- dependents_released: how many entries of a task's dependents an earlier
-- end of it has released. A task that ends again (Retry of a discarded
-- task, RetryForce of a completed one) releases only the entries after
-- them: a dependent counts each of its dependencies' ends once. NULL (no
-- end before) for every row: adding it rewrites nothing.
ALTER TABLE jobfence_jobs ADD COLUMN IF NOT EXISTS dependents_released integer;
ALTER TABLE jobfence_jobs_finished ADD COLUMN IF NOT EXISTS dependents_released integer;

-- +goose Down
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- Refused while an edge waits: its dependent would stay pending, since
-- the workers before this migration do not read this table. Let this
-- release's workers run until it is empty (the promoter takes an edge
-- within its interval of the dependency's end), then migrate down.
-- +goose StatementBegin
DO $$
BEGIN
    IF to_regclass('jobfence_task_edges') IS NOT NULL AND EXISTS (SELECT FROM jobfence_task_edges) THEN
        RAISE EXCEPTION 'jobfence: appended workflow tasks still wait for their dependencies (jobfence_task_edges is not empty): run this release''s workers until it is, then migrate down';
    END IF;
END $$;
-- +goose StatementEnd
DROP TABLE IF EXISTS jobfence_task_edges;
ALTER TABLE jobfence_jobs DROP COLUMN IF EXISTS dependents_released;
ALTER TABLE jobfence_jobs_finished DROP COLUMN IF EXISTS dependents_released;
