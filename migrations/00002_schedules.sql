-- +goose NO TRANSACTION
-- +goose Up
-- One row per cron schedule name, written by every scheduler instance that
-- registers it (the last writer's definition wins). last_fire is the latest
-- fire whose job was enqueued; it only moves forward and anchors catch-up
-- after downtime. next_fire is the fire after it, for display.
--
-- Outside a transaction (NO TRANSACTION above) so that the index on the
-- jobs table is built CONCURRENTLY, as in 00006: every statement may run
-- again.
CREATE TABLE IF NOT EXISTS jobfence_schedules (
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

-- An index an interrupted concurrent build left invalid is dropped; on a
-- small table the index is built at once, unless the table is busy (a
-- transaction holds it past lock_timeout): then the concurrent build
-- below makes it without stopping writes.
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
          AND c.relname = 'jobfence_jobs_unfinished_key'
    LOOP
        EXECUTE format('DROP INDEX %I.%I', r.nspname, r.relname);
    END LOOP;
    IF (SELECT count(*) FROM (SELECT 1 FROM jobfence_jobs LIMIT 10000) s) < 10000 THEN
        BEGIN
            CREATE INDEX IF NOT EXISTS jobfence_jobs_unfinished_key ON jobfence_jobs (unique_key)
                WHERE unique_key IS NOT NULL AND state NOT IN ('completed', 'discarded', 'cancelled');
        EXCEPTION WHEN lock_not_available THEN
            NULL;
        END;
    END IF;
END $$;
-- +goose StatementEnd

-- Serves SkipIfRunning: the unfinished jobs of a schedule's fires, found by
-- a range on their unique keys (cron:<name>:<unix>). Finished jobs are
-- not in it, so a check reads the few unfinished runs of one schedule,
-- not every fire kept until the pruner removes it.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobfence_jobs_unfinished_key ON jobfence_jobs (unique_key)
    WHERE unique_key IS NOT NULL AND state NOT IN ('completed', 'discarded', 'cancelled');

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS jobfence_jobs_unfinished_key;
-- +goose StatementBegin
DO $$
BEGIN
    SET LOCAL lock_timeout = '1s';
    DROP TABLE IF EXISTS jobfence_schedules;
END $$;
-- +goose StatementEnd
