-- +goose Up
-- One row per cron schedule name, written by every scheduler instance that
-- registers it (the last writer's definition wins). last_fire is the latest
-- fire whose job was enqueued; it only moves forward and anchors catch-up
-- after downtime. next_fire is the fire after it, for display.
CREATE TABLE jobfence_schedules (
    name            text        PRIMARY KEY,
    spec            text        NOT NULL,
    time_zone       text        NOT NULL,
    kind            text        NOT NULL,
    queue           text        NOT NULL,
    catch_up        text        NOT NULL,
    skip_if_running boolean     NOT NULL DEFAULT false,
    next_fire       timestamptz,
    last_fire       timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- Serves SkipIfRunning: the unfinished jobs of a schedule's fires, found by
-- a range on their unique keys (cron:<name>:<unix>). Finished jobs are
-- not in it, so a check reads the few unfinished runs of one schedule,
-- not every fire kept until the pruner removes it.
CREATE INDEX jobfence_jobs_unfinished_key ON jobfence_jobs (unique_key)
    WHERE unique_key IS NOT NULL AND state NOT IN ('completed', 'discarded', 'cancelled');

-- +goose Down
DROP INDEX jobfence_jobs_unfinished_key;
DROP TABLE jobfence_schedules;
