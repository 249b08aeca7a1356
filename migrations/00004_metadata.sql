-- +goose Up
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- Small string pairs that travel with a job without being its arguments:
-- the W3C traceparent of the span that enqueued it, so the span that runs it
-- can link back (see telemetry/). Written at insert, read by every claim.
ALTER TABLE jobfence_jobs ADD COLUMN metadata jsonb NOT NULL DEFAULT '{}';

-- +goose Down
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
ALTER TABLE jobfence_jobs DROP COLUMN metadata;
