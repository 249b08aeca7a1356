-- +goose Up
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- Completed jobs leave jobfence_jobs (docs/operations.md, "Finished
-- jobs"). The fenced completion moves a job's row, in the same statement,
-- into jobfence_jobs_finished, partitioned by range of finalized_at, and
-- the retention is kept by dropping whole partitions, not by deleting row
-- by row: jobfence_jobs holds the jobs that are to run or running, and
-- its indexes and vacuum passes stay the size of that.
--
--   - jobfence_jobs_finished has every column of jobfence_jobs (a job
--     retried from here moves back whole, with its ID) and two indexes:
--     by id (jobs show, retry) and by finalized_at (the newest finished
--     jobs that queue counts and metrics read). No primary key: a key of a
--     partitioned table must hold the partition key; IDs come from
--     jobfence_jobs' identity, and a row is in one of the two tables.
--   - Partitions are created and dropped by every worker's maintenance
--     (pgqueue.Client.MaintainFinished), named
--     jobfence_jobs_finished_<lower bound, UTC, YYYYMMDDhhmmss>.
--   - jobfence_finished_bounds holds the range its partitions cover
--     without a gap, [lo, hi): a completion moves a row only while now()
--     is in it, and completes it in place otherwise (maintenance stalled
--     past hi, or not run yet), where the batched pruner deletes it as it
--     always did. So a completion never fails for want of a partition, and
--     there is no DEFAULT partition (one would forbid DETACH PARTITION
--     CONCURRENTLY).
--
-- Jobs that must stay where their unique keys and dependents find them
-- complete in place: those with a unique_key or with unique_states that
-- include completed, workflow tasks and jobs a limit governs.
CREATE TABLE IF NOT EXISTS jobfence_jobs_finished (
    id                 bigint      NOT NULL,
    queue              text        NOT NULL,
    kind               text        NOT NULL,
    args               jsonb       NOT NULL,
    state              text        NOT NULL,
    priority           smallint    NOT NULL,
    scheduled_at       timestamptz NOT NULL,
    attempt            integer     NOT NULL,
    max_attempts       integer     NOT NULL,
    fence              bigint      NOT NULL,
    lease_expires_at   timestamptz,
    unique_key         text,
    errors             jsonb       NOT NULL,
    attempted_by       text[]      NOT NULL,
    created_at         timestamptz NOT NULL,
    attempted_at       timestamptz,
    finalized_at       timestamptz NOT NULL,
    metadata           jsonb       NOT NULL,
    trace_context      bytea,
    idempotency_key    uuid,
    deadline           timestamptz,
    timeout_us         bigint,
    unique_hash        bytea,
    unique_states      smallint,
    limit_name         text,
    limit_part         text,
    limit_slot         integer,
    output             jsonb,
    workflow_id        uuid,
    task_name          text,
    depends_on         bigint[],
    dependents         bigint[],
    deps_left          integer,
    run_anyway         boolean,
    delete_on_complete boolean,
    -- 00020 adds it to jobfence_jobs.
    run_trace          bytea
) PARTITION BY RANGE (finalized_at);
CREATE INDEX IF NOT EXISTS jobfence_jobs_finished_id ON jobfence_jobs_finished (id);
CREATE INDEX IF NOT EXISTS jobfence_jobs_finished_finalized ON jobfence_jobs_finished (finalized_at);

CREATE TABLE IF NOT EXISTS jobfence_finished_bounds (
    one boolean     PRIMARY KEY DEFAULT true CHECK (one),
    lo  timestamptz NOT NULL,
    hi  timestamptz NOT NULL
);

-- +goose Down
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- Run the release before this one's workers first. The completed jobs in
-- jobfence_jobs_finished go with it.
DROP TABLE IF EXISTS jobfence_finished_bounds;
DROP TABLE IF EXISTS jobfence_jobs_finished;
