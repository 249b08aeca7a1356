-- +goose Up
-- The W3C traceparent of the span that enqueued a job, packed: version,
-- trace id, parent id and flags, 26 bytes, NULL for a job enqueued without
-- a sampled span. It used to be a key of metadata, where its name and 55
-- characters took about 80 bytes of jsonb that every claim and completion
-- copied into a new row version and every claim printed as text; a
-- traceparent that does not have the shape W3C prints stays there. Adding
-- a nullable column without a default rewrites nothing.
ALTER TABLE jobfence_jobs ADD COLUMN trace_context bytea;

-- +goose Down
-- Back into metadata, so that going down loses no link.
UPDATE jobfence_jobs
SET metadata = metadata || jsonb_build_object('traceparent',
        encode(substring(trace_context FROM 1 FOR 1), 'hex') || '-' ||
        encode(substring(trace_context FROM 2 FOR 16), 'hex') || '-' ||
        encode(substring(trace_context FROM 18 FOR 8), 'hex') || '-' ||
        encode(substring(trace_context FROM 26 FOR 1), 'hex'))
WHERE trace_context IS NOT NULL;
ALTER TABLE jobfence_jobs DROP COLUMN trace_context;
