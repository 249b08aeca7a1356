-- +goose Up
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- Per-attempt logs (jobfence.Logger, docs/observability.md): the records
-- an attempt's handler wrote, stored at the end of the attempt, before
-- its outcome, under its fence, one row per attempt (keyed by the fence:
-- a put-back runs the same attempt number again under a new one). Only
-- the job's last few attempts' rows are kept (pruned counts the others);
-- the rows go with their job (prune, a dropped finished partition,
-- delete). A new table that no one else sees yet: creating it locks
-- nothing of the fleet's, and a job that logs nothing has no row.
CREATE TABLE IF NOT EXISTS jobfence_attempt_logs (
    job_id     bigint      NOT NULL,
    fence      bigint      NOT NULL,
    attempt    integer     NOT NULL,
    records    jsonb       NOT NULL,
    dropped    integer     NOT NULL DEFAULT 0,
    pruned     integer     NOT NULL DEFAULT 0,
    written_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, fence)
);

-- +goose Down
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- The logs stored are lost; nothing else reads them.
DROP TABLE IF EXISTS jobfence_attempt_logs;
