-- +goose NO TRANSACTION
-- +goose Up
-- The W3C traceparent of the span that enqueued a job, packed: version,
-- trace id, parent id and flags, 26 bytes, NULL for a job enqueued without
-- a sampled span. It used to be a key of metadata, where its name and 55
-- characters took about 80 bytes of jsonb that every claim and completion
-- copied into a new row version and every claim printed as text; a
-- traceparent that does not have the shape W3C prints stays there. Adding
-- a nullable column without a default rewrites nothing.
--
-- Outside a transaction (NO TRANSACTION above) so that going down can move
-- the traceparents back in batches of short transactions; every statement
-- may run again.
-- +goose StatementBegin
DO $$
BEGIN
    SET LOCAL lock_timeout = '1s';
    ALTER TABLE jobfence_jobs ADD COLUMN IF NOT EXISTS trace_context bytea;
END $$;
-- +goose StatementEnd

-- +goose Down
-- Back into metadata, so that going down loses no link, walking the jobs
-- by id, 10,000 ids per transaction (the fleet waits 1 s at most for a
-- row a batch holds); then, holding the table, the jobs inserted since
-- the walk passed (none once the workers run the release before 00009,
-- which writes no trace_context: migrate down after rolling them back)
-- and the column. The walk leaves trace_context empty behind it, so that
-- running it again, after a lock_timeout, moves nothing twice.
-- +goose StatementBegin
DO $$
DECLARE
    lo bigint;
    hi bigint;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'jobfence_jobs'::regclass
                   AND attname = 'trace_context' AND NOT attisdropped) THEN
        RETURN;
    END IF;
    SELECT coalesce(min(id), 0) INTO lo FROM jobfence_jobs;
    LOOP
        SELECT max(id) INTO hi FROM jobfence_jobs;
        EXIT WHEN hi IS NULL OR lo > hi;
        PERFORM set_config('lock_timeout', '1s', true);
        UPDATE jobfence_jobs
        SET metadata = metadata || jsonb_build_object('traceparent',
                encode(substring(trace_context FROM 1 FOR 1), 'hex') || '-' ||
                encode(substring(trace_context FROM 2 FOR 16), 'hex') || '-' ||
                encode(substring(trace_context FROM 18 FOR 8), 'hex') || '-' ||
                encode(substring(trace_context FROM 26 FOR 1), 'hex')),
            trace_context = NULL
        WHERE id >= lo AND id < lo + 10000 AND trace_context IS NOT NULL;
        COMMIT;
        lo := lo + 10000;
    END LOOP;
    PERFORM set_config('lock_timeout', '1s', true);
    LOCK TABLE jobfence_jobs IN ACCESS EXCLUSIVE MODE;
    UPDATE jobfence_jobs
    SET metadata = metadata || jsonb_build_object('traceparent',
            encode(substring(trace_context FROM 1 FOR 1), 'hex') || '-' ||
            encode(substring(trace_context FROM 2 FOR 16), 'hex') || '-' ||
            encode(substring(trace_context FROM 18 FOR 8), 'hex') || '-' ||
            encode(substring(trace_context FROM 26 FOR 1), 'hex'))
    WHERE id >= lo AND trace_context IS NOT NULL;
    ALTER TABLE jobfence_jobs DROP COLUMN trace_context;
END $$;
-- +goose StatementEnd
