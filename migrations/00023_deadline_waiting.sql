-- +goose NO TRANSACTION
-- +goose Up
-- jobfence_jobs_deadline_waiting serves the promoter's discard of the jobs
-- not started by their deadline, in every state of a job that has not
-- started: waiting for its time (scheduled, retryable), for a claim
-- (available), for a limit's slot (limited) or for its workflow
-- dependencies (pending). jobfence_jobs_deadline (00010) held the first
-- three only, so a job whose deadline passed while it waited for a slot or
-- a dependency was not found; this index replaces it. Only such jobs with
-- a deadline are in it: jobs without one, and running or final ones, cost
-- it nothing. It is built CONCURRENTLY outside a transaction (NO
-- TRANSACTION above), as in 00007: an index an interrupted build left
-- invalid is dropped first, and a small table that is not busy gets it at
-- once. The old index is dropped after it. Every statement may run again.
--
-- Migrate before rolling out the release that needs it: its promoter's
-- sweep reads the new states, which the old index does not hold. The
-- release before reads a subset of the new index's states, which the new
-- index serves too.
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
          AND c.relname = 'jobfence_jobs_deadline_waiting'
    LOOP
        EXECUTE format('DROP INDEX %I.%I', r.nspname, r.relname);
    END LOOP;
    IF (SELECT count(*) FROM (SELECT 1 FROM jobfence_jobs LIMIT 10000) s) < 10000 THEN
        BEGIN
            CREATE INDEX IF NOT EXISTS jobfence_jobs_deadline_waiting ON jobfence_jobs (deadline)
                WHERE deadline IS NOT NULL AND state IN ('available', 'scheduled', 'retryable', 'limited', 'pending');
            DROP INDEX IF EXISTS jobfence_jobs_deadline;
        EXCEPTION WHEN lock_not_available THEN
            -- A busy table: the concurrent statements below do it.
            NULL;
        END;
    END IF;
END $$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobfence_jobs_deadline_waiting ON jobfence_jobs (deadline)
    WHERE deadline IS NOT NULL AND state IN ('available', 'scheduled', 'retryable', 'limited', 'pending');
DROP INDEX CONCURRENTLY IF EXISTS jobfence_jobs_deadline;

-- +goose Down
-- Run the release before this one's workers first: this release's sweep
-- reads the states that only the new index holds.
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
          AND c.relname = 'jobfence_jobs_deadline'
    LOOP
        EXECUTE format('DROP INDEX %I.%I', r.nspname, r.relname);
    END LOOP;
    IF (SELECT count(*) FROM (SELECT 1 FROM jobfence_jobs LIMIT 10000) s) < 10000 THEN
        BEGIN
            CREATE INDEX IF NOT EXISTS jobfence_jobs_deadline ON jobfence_jobs (deadline)
                WHERE deadline IS NOT NULL AND state IN ('available', 'scheduled', 'retryable');
            DROP INDEX IF EXISTS jobfence_jobs_deadline_waiting;
        EXCEPTION WHEN lock_not_available THEN
            -- A busy table: the concurrent statements below do it.
            NULL;
        END;
    END IF;
END $$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobfence_jobs_deadline ON jobfence_jobs (deadline)
    WHERE deadline IS NOT NULL AND state IN ('available', 'scheduled', 'retryable');
DROP INDEX CONCURRENTLY IF EXISTS jobfence_jobs_deadline_waiting;
