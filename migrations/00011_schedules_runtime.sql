-- +goose Up
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- Schedules changed while the fleet runs (scheduler.Put, Pause, Resume,
-- Delete, Trigger; jobfence schedules add|pause|resume|delete|trigger).
-- A row now holds a schedule's whole definition, so that every instance
-- can fire a schedule that was added at run time: its args, priority,
-- max_attempts and catch_up_window (NULL: half the job retention) beside
-- the columns of 00002. Rows written before this migration have NULL
-- args, priority and max_attempts until an instance that defines them in
-- code starts.
--
-- origin is 'code' for a schedule an instance defines in code (Add, then
-- Start upserts it; only instances that define it fire it) and 'runtime'
-- for one added at run time (every instance fires it). version is drawn
-- from jobfence_schedules_version at every change of the definition or of
-- the paused state: instances poll (name, version) and reload the rows
-- whose version moved, and a fire's transaction enqueues only if the row
-- still has the version the instance fired from and is not paused, so a
-- stale instance cannot enqueue a paused or replaced schedule's fire.
-- fires_from: fires at or before it are never enqueued (set at a run-time
-- change and at resume, so the fires of a pause are not caught up).
-- triggered_at is the fire time of the last "run now", which a second
-- one within a few seconds joins instead of enqueuing another.
--
-- Adding nullable columns and columns with constant defaults rewrites
-- nothing; the table is small either way.
CREATE SEQUENCE IF NOT EXISTS jobfence_schedules_version;
ALTER TABLE jobfence_schedules
    ADD COLUMN IF NOT EXISTS args            jsonb,
    ADD COLUMN IF NOT EXISTS priority        smallint,
    ADD COLUMN IF NOT EXISTS max_attempts    integer,
    ADD COLUMN IF NOT EXISTS catch_up_window interval,
    ADD COLUMN IF NOT EXISTS origin          text NOT NULL DEFAULT 'code',
    ADD COLUMN IF NOT EXISTS version         bigint NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS paused_at       timestamptz,
    ADD COLUMN IF NOT EXISTS paused_by       text,
    ADD COLUMN IF NOT EXISTS fires_from      timestamptz,
    ADD COLUMN IF NOT EXISTS triggered_at    timestamptz;

-- +goose Down
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
ALTER TABLE jobfence_schedules
    DROP COLUMN IF EXISTS args,
    DROP COLUMN IF EXISTS priority,
    DROP COLUMN IF EXISTS max_attempts,
    DROP COLUMN IF EXISTS catch_up_window,
    DROP COLUMN IF EXISTS origin,
    DROP COLUMN IF EXISTS version,
    DROP COLUMN IF EXISTS paused_at,
    DROP COLUMN IF EXISTS paused_by,
    DROP COLUMN IF EXISTS fires_from,
    DROP COLUMN IF EXISTS triggered_at;
DROP SEQUENCE IF EXISTS jobfence_schedules_version;
