-- +goose NO TRANSACTION
-- +goose Up
-- Claims read only available jobs; jobs waiting for a time of their own
-- (scheduled, retryable, snoozed) have an index of their own by time, from
-- which every worker's promoter (pgqueue.Client.Promote) makes the due ones
-- available. Before, one index held all three states in priority order, and
-- a claim that found fewer ready jobs than its limit walked every job
-- waiting for the future (1M future retries: 64 ms and ~6k buffers per
-- claim). The rescuer's index no longer holds lease_expires_at, and the
-- table's pages keep room for new row versions, so a heartbeat, which
-- changes nothing else, can be a HOT update instead of adding an entry to
-- every index of the table.
--
-- This file runs outside a transaction (NO TRANSACTION above) so that a big
-- table keeps taking inserts, claims and completions while its indexes are
-- built: CREATE INDEX CONCURRENTLY cannot run in a transaction. A concurrent
-- build waits for every transaction that started before it (on any table),
-- so on a small table, such as a new installation or a test's schema, the
-- indexes are built in one ordinary transaction first (a few milliseconds of
-- blocked writes), and the concurrent statements then find them and do
-- nothing. That transaction waits 1 s at most for its locks (lock_timeout),
-- since writes queue behind it; when a transaction holds the table longer,
-- it gives way to the concurrent statements, which wait without stopping
-- anyone. Every statement may be run again: if the migration is
-- interrupted, run it again; an index an interrupted concurrent build left
-- invalid is dropped and built anew.
--
-- Until the workers run a version that claims from the new index, claims of
-- older versions find no index of theirs: upgrade the workers right after
-- migrating.

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
          AND c.relname IN ('jobfence_jobs_available', 'jobfence_jobs_waiting', 'jobfence_jobs_running')
    LOOP
        EXECUTE format('DROP INDEX %I.%I', r.nspname, r.relname);
    END LOOP;
    IF (SELECT count(*) FROM (SELECT 1 FROM jobfence_jobs LIMIT 10000) s) < 10000 THEN
        BEGIN
            CREATE INDEX IF NOT EXISTS jobfence_jobs_available ON jobfence_jobs (queue, priority, scheduled_at, id)
                WHERE state = 'available';
            CREATE INDEX IF NOT EXISTS jobfence_jobs_waiting ON jobfence_jobs (scheduled_at)
                WHERE state IN ('scheduled', 'retryable');
            CREATE INDEX IF NOT EXISTS jobfence_jobs_running ON jobfence_jobs (attempted_at)
                WHERE state = 'running' AND attempted_at IS NOT NULL;
            DROP INDEX IF EXISTS jobfence_jobs_claim;
            DROP INDEX IF EXISTS jobfence_jobs_lease;
        EXCEPTION WHEN lock_not_available THEN
            -- A busy table: the concurrent statements below do it.
            NULL;
        END;
    END IF;
END $$;
-- +goose StatementEnd

-- Serves the claim: the available jobs of a queue in priority order.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobfence_jobs_available ON jobfence_jobs (queue, priority, scheduled_at, id)
    WHERE state = 'available';
-- Serves the promoter: jobs waiting for their time, by time.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobfence_jobs_waiting ON jobfence_jobs (scheduled_at)
    WHERE state IN ('scheduled', 'retryable');
-- Serves the rescuer: the running jobs, whose leases it checks on the row.
-- The predicate names attempted_at, which a completion or a heartbeat does
-- not mention, so that neither can read this index to scan every running
-- row (and its dead versions) instead of probing the primary key.
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobfence_jobs_running ON jobfence_jobs (attempted_at)
    WHERE state = 'running' AND attempted_at IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS jobfence_jobs_claim;
DROP INDEX CONCURRENTLY IF EXISTS jobfence_jobs_lease;
-- Room on each page for a heartbeat's new row version, so that it can be
-- HOT: at PostgreSQL's default of 100, 20% of the heartbeats of 500 jobs
-- beating every second were; at 70, 95% (jobfence bench --mode heartbeat).
-- It applies to pages written from now on, and takes only a lock that
-- lets reads and writes go on (bounded all the same, as every ALTER).
-- +goose StatementBegin
DO $$
BEGIN
    SET LOCAL lock_timeout = '1s';
    ALTER TABLE jobfence_jobs SET (fillfactor = 70);
END $$;
-- +goose StatementEnd

-- +goose Down
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
          AND c.relname IN ('jobfence_jobs_claim', 'jobfence_jobs_lease')
    LOOP
        EXECUTE format('DROP INDEX %I.%I', r.nspname, r.relname);
    END LOOP;
    IF (SELECT count(*) FROM (SELECT 1 FROM jobfence_jobs LIMIT 10000) s) < 10000 THEN
        BEGIN
            CREATE INDEX IF NOT EXISTS jobfence_jobs_claim ON jobfence_jobs (queue, priority, scheduled_at, id)
                WHERE state IN ('available', 'scheduled', 'retryable');
            CREATE INDEX IF NOT EXISTS jobfence_jobs_lease ON jobfence_jobs (lease_expires_at) WHERE lease_expires_at IS NOT NULL;
            DROP INDEX IF EXISTS jobfence_jobs_available;
            DROP INDEX IF EXISTS jobfence_jobs_waiting;
            DROP INDEX IF EXISTS jobfence_jobs_running;
        EXCEPTION WHEN lock_not_available THEN
            -- A busy table: the concurrent statements below do it.
            NULL;
        END;
    END IF;
END $$;
-- +goose StatementEnd

CREATE INDEX CONCURRENTLY IF NOT EXISTS jobfence_jobs_claim ON jobfence_jobs (queue, priority, scheduled_at, id)
    WHERE state IN ('available', 'scheduled', 'retryable');
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobfence_jobs_lease ON jobfence_jobs (lease_expires_at) WHERE lease_expires_at IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS jobfence_jobs_available;
DROP INDEX CONCURRENTLY IF EXISTS jobfence_jobs_waiting;
DROP INDEX CONCURRENTLY IF EXISTS jobfence_jobs_running;
-- +goose StatementBegin
DO $$
BEGIN
    SET LOCAL lock_timeout = '1s';
    ALTER TABLE jobfence_jobs RESET (fillfactor);
END $$;
-- +goose StatementEnd
