-- +goose NO TRANSACTION
-- +goose Up
-- Flow control: concurrency limits, rate limits and sequences, stored here
-- so that every instance reads the same values at every grant (a change
-- applies fleet-wide at once, with no restart).
--
--   - jobfence_limits: one row per limit, for a queue or for one kind of a
--     queue. partition_by names the JSON fields of the args that make the
--     partition (none: one partition, the whole limit). concurrency caps
--     the jobs of a partition holding a slot (available or running, and
--     retrying or discarded where hold_retrying or hold_discarded say so);
--     rate caps the starts of a partition per period_us.
--   - jobfence_limit_slots: a partition's slots, kind 0 for concurrency
--     (slot < concurrency), kind 1 for rate (slot < rate). A slot names the
--     job it was granted to; the job names its slot back (limit_slot), and
--     a concurrency slot is free when that job no longer holds it (its
--     state left available and running: completed, failed, cancelled, or
--     rescued when its lease expired). A rate slot is free a period after
--     the start of the job it was granted to. A grant takes a free slot by
--     its generation (gen), compare-and-set: of two grants that read the
--     same slot free, one wins.
--   - jobfence_jobs gets limit_name, limit_part and limit_slot, NULL for
--     a job no limit governs (free for it: a nullable column without a
--     default rewrites nothing), and the state 'limited': a job of a limit
--     that waits for a slot. Claims read only available jobs, so a limited
--     job costs a claim nothing; a grant makes it available with its slot.
--
-- The state check is rewritten from the one in place, so that another
-- migration's states are kept: it is added NOT VALID (every row already
-- satisfies it, and checking the whole table would take a lock for as long
-- as the scan), and rows written from then on are checked all the same.
--
-- The state limited gets its bit of a unique job's states (migration
-- 00012), 128, as queue's stateBit gives it (a unique job that refuses
-- duplicates while available does while limited too: UniqueOpts.States).
-- The function changes before any job can be limited, so the unique
-- index's entries stay what it computes.
--
-- jobfence_jobs_limited serves the grants: the limited jobs of a partition
-- in insert order. Only limited jobs are in it. Built CONCURRENTLY outside
-- a transaction (NO TRANSACTION above), as in 00007. Every statement may
-- run again.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION jobfence_state_in_bitmask(bitmask smallint, state text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (bitmask & CASE state
        WHEN 'available' THEN 1 WHEN 'scheduled' THEN 2 WHEN 'running' THEN 4 WHEN 'retryable' THEN 8
        WHEN 'completed' THEN 16 WHEN 'discarded' THEN 32 WHEN 'cancelled' THEN 64 WHEN 'limited' THEN 128 ELSE 0 END) <> 0
$$;
-- +goose StatementEnd
-- +goose StatementBegin
DO $$
BEGIN
    SET LOCAL lock_timeout = '1s';
    CREATE TABLE IF NOT EXISTS jobfence_limits (
        name           text PRIMARY KEY,
        queue          text        NOT NULL,
        kind           text        NOT NULL DEFAULT '',
        partition_by   text[]      NOT NULL DEFAULT '{}',
        concurrency    integer     CHECK (concurrency > 0),
        rate           integer     CHECK (rate > 0),
        period_us      bigint      CHECK (period_us > 0),
        hold_retrying  boolean     NOT NULL DEFAULT false,
        hold_discarded boolean     NOT NULL DEFAULT false,
        updated_at     timestamptz NOT NULL DEFAULT now(),
        CHECK (concurrency IS NOT NULL OR rate IS NOT NULL),
        CHECK ((rate IS NULL) = (period_us IS NULL)),
        UNIQUE (queue, kind)
    );
    CREATE TABLE IF NOT EXISTS jobfence_limit_slots (
        name       text     NOT NULL,
        part       text     NOT NULL,
        kind       smallint NOT NULL,
        slot       integer  NOT NULL,
        job_id     bigint,
        gen        bigint   NOT NULL DEFAULT 0,
        granted_at timestamptz,
        PRIMARY KEY (name, part, kind, slot)
    );
    ALTER TABLE jobfence_jobs
        ADD COLUMN IF NOT EXISTS limit_name text,
        ADD COLUMN IF NOT EXISTS limit_part text,
        ADD COLUMN IF NOT EXISTS limit_slot integer;
END $$;
-- +goose StatementEnd
-- +goose StatementBegin
DO $$
DECLARE
    c record;
    def text;
BEGIN
    SET LOCAL lock_timeout = '1s';
    FOR c IN
        SELECT conname, pg_get_constraintdef(oid) AS def FROM pg_constraint
        WHERE conrelid = 'jobfence_jobs'::regclass AND contype = 'c'
          AND pg_get_constraintdef(oid) LIKE '%''running''::text%'
          AND pg_get_constraintdef(oid) NOT LIKE '%''limited''::text%'
    LOOP
        def := replace(replace(c.def, ' NOT VALID', ''), '''running''::text', '''running''::text, ''limited''::text');
        EXECUTE format('ALTER TABLE jobfence_jobs DROP CONSTRAINT %I, ADD CONSTRAINT %I %s NOT VALID', c.conname, c.conname, def);
    END LOOP;
END $$;
-- +goose StatementEnd
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
          AND c.relname = 'jobfence_jobs_limited'
    LOOP
        EXECUTE format('DROP INDEX %I.%I', r.nspname, r.relname);
    END LOOP;
    IF (SELECT count(*) FROM (SELECT 1 FROM jobfence_jobs LIMIT 10000) s) < 10000 THEN
        BEGIN
            CREATE INDEX IF NOT EXISTS jobfence_jobs_limited ON jobfence_jobs (limit_name, limit_part, id)
                WHERE state = 'limited';
        EXCEPTION WHEN lock_not_available THEN
            -- A busy table: the concurrent build below makes it.
            NULL;
        END;
    END IF;
END $$;
-- +goose StatementEnd
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobfence_jobs_limited ON jobfence_jobs (limit_name, limit_part, id)
    WHERE state = 'limited';

-- +goose Down
-- Run the release before this one's workers first. Limited jobs become
-- available (with no limit left to wait for), 10,000 a transaction; then,
-- holding the table, those limited since, and the state leaves the check;
-- the columns (jobfence_jobs_limited with them) and tables go.
-- +goose StatementBegin
DO $$
DECLARE
    n bigint;
    c record;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'jobfence_jobs'::regclass
                   AND attname = 'limit_name' AND NOT attisdropped) THEN
        RETURN;
    END IF;
    LOOP
        PERFORM set_config('lock_timeout', '1s', true);
        UPDATE jobfence_jobs SET state = 'available'
        WHERE id IN (SELECT id FROM jobfence_jobs WHERE state = 'limited' LIMIT 10000 FOR UPDATE SKIP LOCKED);
        GET DIAGNOSTICS n = ROW_COUNT;
        COMMIT;
        EXIT WHEN n = 0;
    END LOOP;
    PERFORM set_config('lock_timeout', '1s', true);
    LOCK TABLE jobfence_jobs IN ACCESS EXCLUSIVE MODE;
    UPDATE jobfence_jobs SET state = 'available' WHERE state = 'limited';
    FOR c IN
        SELECT conname, pg_get_constraintdef(oid) AS def FROM pg_constraint
        WHERE conrelid = 'jobfence_jobs'::regclass AND contype = 'c'
          AND pg_get_constraintdef(oid) LIKE '%''limited''::text%'
    LOOP
        EXECUTE format('ALTER TABLE jobfence_jobs DROP CONSTRAINT %I, ADD CONSTRAINT %I %s NOT VALID', c.conname, c.conname,
            replace(replace(c.def, ' NOT VALID', ''), ', ''limited''::text', ''));
    END LOOP;
    ALTER TABLE jobfence_jobs
        DROP COLUMN IF EXISTS limit_name,
        DROP COLUMN IF EXISTS limit_part,
        DROP COLUMN IF EXISTS limit_slot;
    DROP TABLE IF EXISTS jobfence_limit_slots;
    DROP TABLE IF EXISTS jobfence_limits;
END $$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION jobfence_state_in_bitmask(bitmask smallint, state text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (bitmask & CASE state
        WHEN 'available' THEN 1 WHEN 'scheduled' THEN 2 WHEN 'running' THEN 4 WHEN 'retryable' THEN 8
        WHEN 'completed' THEN 16 WHEN 'discarded' THEN 32 WHEN 'cancelled' THEN 64 ELSE 0 END) <> 0
$$;
-- +goose StatementEnd
