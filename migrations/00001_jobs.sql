-- +goose Up
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
-- Every claim takes a value from this sequence: the fence that every
-- completion of that claim must present.
CREATE SEQUENCE jobfence_fence_seq;

CREATE TABLE jobfence_jobs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue            text        NOT NULL DEFAULT 'default',
    kind             text        NOT NULL,
    args             jsonb       NOT NULL DEFAULT '{}',
    state            text        NOT NULL DEFAULT 'available'
        CHECK (state IN ('available', 'scheduled', 'running', 'retryable', 'completed', 'discarded', 'cancelled')),
    priority         smallint    NOT NULL DEFAULT 1,
    scheduled_at     timestamptz NOT NULL DEFAULT now(),
    attempt          integer     NOT NULL DEFAULT 0,
    max_attempts     integer     NOT NULL DEFAULT 25 CHECK (max_attempts > 0),
    fence            bigint      NOT NULL DEFAULT 0,
    lease_expires_at timestamptz,
    unique_key       text,
    errors           jsonb       NOT NULL DEFAULT '[]',
    attempted_by     text[]      NOT NULL DEFAULT '{}',
    created_at       timestamptz NOT NULL DEFAULT now(),
    attempted_at     timestamptz,
    finalized_at     timestamptz
);

-- Serves the claim: the next ready jobs of a queue in priority order.
CREATE INDEX jobfence_jobs_claim ON jobfence_jobs (queue, priority, scheduled_at, id)
    WHERE state IN ('available', 'scheduled', 'retryable');
-- Serves the rescuer: running jobs whose lease has expired. Only running
-- jobs have a lease. The predicate deliberately does not mention state: a
-- state = 'running' index would tempt the planner into scanning every
-- running row (and its dead versions) for each batched completion instead of
-- probing the primary key.
CREATE INDEX jobfence_jobs_lease ON jobfence_jobs (lease_expires_at) WHERE lease_expires_at IS NOT NULL;
-- Serves the pruner: finished jobs by age.
CREATE INDEX jobfence_jobs_finalized ON jobfence_jobs (finalized_at)
    WHERE state IN ('completed', 'discarded', 'cancelled');
-- One job per unique key, for as long as the row is kept.
CREATE UNIQUE INDEX jobfence_jobs_unique_key ON jobfence_jobs (unique_key) WHERE unique_key IS NOT NULL;

-- +goose Down
-- A lock that stops the fleet is waited for 1 s at most (see doc.go).
SET LOCAL lock_timeout = '1s';
DROP TABLE jobfence_jobs;
DROP SEQUENCE jobfence_fence_seq;
