-- +goose Up
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- Queue settings for the fleet (docs/operations.md, "Resizing, adding
-- and removing queues"), beside the pause: the workers read them with the
-- paused set (NOTIFY jobfence_pause, payload the queue's name, and a
-- poll), never waiting on a lock for them.
--
--   - concurrency: NULL, each worker keeps its configured concurrency of
--     the queue; else every worker working the queue runs that many of
--     its jobs at once.
--   - run_state: NULL, the workers configured for the queue work it;
--     'started', the workers that opted in (worker.Config.FleetQueues)
--     work it too, at concurrency; 'stopped', no worker works it.
--
-- Nullable without a default: adding them rewrites nothing, and the
-- checks read a table with a row per queue ever paused or set.
ALTER TABLE jobfence_queues
    ADD COLUMN IF NOT EXISTS concurrency integer CHECK (concurrency > 0),
    ADD COLUMN IF NOT EXISTS run_state text CHECK (run_state IN ('started', 'stopped')),
    ADD CONSTRAINT jobfence_queues_started_concurrency CHECK (run_state IS DISTINCT FROM 'started' OR concurrency IS NOT NULL);

-- +goose Down
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
ALTER TABLE jobfence_queues
    DROP CONSTRAINT IF EXISTS jobfence_queues_started_concurrency,
    DROP COLUMN IF EXISTS run_state,
    DROP COLUMN IF EXISTS concurrency;
